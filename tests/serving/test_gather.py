"""The batch gatherer: one batch at a time, each taking every request that arrived while the
previous one ran (up to ``max_batch_size``), results in order, an error to its whole batch."""

import asyncio
import threading

import pytest

from pettingllms_rllib.serving.gather import BatchGatherer


def test_requests_arriving_during_a_batch_form_the_next_batch_whole():
    release = threading.Event()

    def run(items):
        if items == ["first"]:
            assert release.wait(timeout=20)
        return [f"{item}!" for item in items]

    gatherer = BatchGatherer(run, max_batch_size=16, wait_s=0.0)

    async def scenario():
        first = asyncio.create_task(gatherer.submit("first"))
        await asyncio.sleep(0.05)  # the first batch is running
        rest = [asyncio.create_task(gatherer.submit(i)) for i in range(10)]
        await asyncio.sleep(0.05)  # all ten arrive before it ends
        release.set()
        return await first, await asyncio.gather(*rest)

    first, rest = asyncio.run(scenario())
    assert first == "first!" and rest == [f"{i}!" for i in range(10)]
    assert gatherer.batch_sizes == [1, 10]


def test_a_batch_holds_at_most_max_batch_size_and_waits_for_late_arrivals():
    gatherer = BatchGatherer(lambda items: list(items), max_batch_size=3, wait_s=0.5)

    async def scenario():
        early = [asyncio.create_task(gatherer.submit(i)) for i in range(2)]
        await asyncio.sleep(0.05)  # within the first batch's wait
        late = [asyncio.create_task(gatherer.submit(i)) for i in range(2, 5)]
        return await asyncio.gather(*early, *late)

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4]
    assert gatherer.batch_sizes == [3, 2]


def test_an_error_reaches_every_request_of_its_batch_and_the_next_batch_still_runs():
    def run(items):
        if "bad" in items:
            raise ValueError("boom")
        return list(items)

    gatherer = BatchGatherer(run, max_batch_size=4, wait_s=0.05)

    async def scenario():
        failed = await asyncio.gather(gatherer.submit("bad"), gatherer.submit("ok"),
                                      return_exceptions=True)
        return failed, await gatherer.submit("later")

    failed, later = asyncio.run(scenario())
    assert all(isinstance(f, ValueError) for f in failed) and later == "later"


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="max_batch_size must be >= 1"):
        BatchGatherer(list, max_batch_size=0, wait_s=0.0)
