"""Removing a folder a hostile program has shaped: iterative, bounded, never raising.

A sandboxed program owns its scratch folder and may leave anything there: a chain of folders
thousands deep (deeper than ``PATH_MAX``, deeper than Python's recursion limit), 100k files,
folders it made unreadable or unwritable, symlink loops. :func:`remove_tree` walks with file
descriptors (``dir_fd`` calls, never a full path), never follows a symlink, restores the owner
permissions of each folder before it lists it, and flattens deep chains: a folder found
:data:`_MAX_OPEN_DEPTH` levels down is renamed to the top of the tree, so the number of open
descriptors stays bounded whatever the depth. It stops at a time budget and reports whether the
folder is gone; it never raises.
"""

from __future__ import annotations

import logging
import os
import stat
import time

logger = logging.getLogger(__name__)

__all__ = ["remove_tree"]

_MAX_OPEN_DEPTH = 32
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def remove_tree(path: str, *, time_budget_s: float = 30.0) -> bool:
    """Delete ``path`` and everything below it; True when it is gone. Never raises."""
    deadline = time.monotonic() + time_budget_s
    try:
        if not os.path.lexists(path):
            return True
        if not os.path.isdir(path) or os.path.islink(path):
            os.unlink(path)
            return True
        parent, name = os.path.split(os.path.abspath(path))
        parent_fd = os.open(parent, _DIR_FLAGS)
    except OSError as exc:
        logger.warning("sandbox cleanup of %s failed: %r", path, exc)
        return not os.path.lexists(path)
    try:
        counter = 0
        while time.monotonic() < deadline:
            counter += 1
            try:
                _remove_entry(parent_fd, name, deadline, counter)
            except OSError as exc:
                logger.debug("sandbox cleanup pass on %s: %r", path, exc)
            if not _exists(parent_fd, name):
                return True
        logger.warning("sandbox scratch folder %s could not be removed in %.0f s", path,
                       time_budget_s)
        return False
    finally:
        os.close(parent_fd)


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False
    except OSError:
        return True


def _remove_entry(dir_fd: int, name: str, deadline: float, counter: int) -> None:
    """One pass over ``name`` in ``dir_fd``: files go, emptied folders go, and a folder found
    :data:`_MAX_OPEN_DEPTH` levels down is moved to the top of the tree (the next pass of the
    caller's loop finds it there, shallow), so no pass holds more descriptors than that."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    # Iterative post-order walk over a stack of (fd, name in parent, parent fd) open folders.
    root_fd = _open_dir(dir_fd, name)
    stack: list[tuple[int, str, int]] = [(root_fd, name, dir_fd)]
    moved = 0
    try:
        while stack and time.monotonic() < deadline:
            fd, own_name, parent_fd = stack[-1]
            child = _next_subfolder(fd)
            if child is None:  # its files are gone and it has no folder left: remove it
                stack.pop()
                os.close(fd)
                try:
                    os.rmdir(own_name, dir_fd=parent_fd)
                except FileNotFoundError:
                    pass
                continue
            if len(stack) >= _MAX_OPEN_DEPTH and fd != root_fd:
                moved += 1
                os.rename(child, f".flat-{counter}-{moved}", src_dir_fd=fd, dst_dir_fd=root_fd)
                continue
            stack.append((_open_dir(fd, child), child, fd))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _open_dir(dir_fd: int, name: str) -> int:
    try:
        os.chmod(name, stat.S_IRWXU, dir_fd=dir_fd, follow_symlinks=False)
    except (OSError, NotImplementedError):
        pass
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _next_subfolder(fd: int) -> str | None:
    """Unlink every non-folder entry of ``fd``; return one subfolder's name, or None."""
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    return entry.name
                os.unlink(entry.name, dir_fd=fd)
            except FileNotFoundError:
                continue
    return None
