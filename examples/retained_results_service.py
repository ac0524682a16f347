"""The results service: on restart, take every retained LatestScore, then go on live.

The MQ publish/subscribe example, on rvasync. A results service listens to
match events (``SOCCER.EVENT.<match>``), keeps the score of each match and
publishes it as ``SOCCER.STATE.LATESTSCORE.<match>``; a current value cache
retains the latest score of every match (in a store file).

1. The service runs, processes some goals and publishes the scores.
2. The service stops (a crash, an upgrade ...) and starts again. It
   subscribes to the events first (so none published from now on is
   missed), then asks the caches for every retained LatestScore
   (``request_retained``, publish on request only), and only then processes
   the events: the goals of the second half add to the recovered scores.
3. A scoreboard joins between the two runs with ``listen(..., retained=True)``:
   it shows the retained scores first, then every change as it is
   published. It also counts the goal events; both listeners share one
   queue and the scoreboard tells state from events by correlation id.

Run: python examples/retained_results_service.py
"""

import asyncio
import sys
import tempfile
from pathlib import Path

import rvasync as rv
from rvasync.testing import free_port

EVENTS = "SOCCER.EVENT.*"
SCORES = "SOCCER.STATE.LATESTSCORE.*"
FIRST_HALF = [("FRA-ARG", "home"), ("FRA-ARG", "home"), ("BRA-GER", "away")]
SECOND_HALF = [("FRA-ARG", "away"), ("BRA-GER", "away"), ("ITA-ESP", "home")]
WAIT = 10.0
EXPECTED = {
    "FRA-ARG": {"home": 2, "away": 1},
    "BRA-GER": {"home": 0, "away": 2},
    "ITA-ESP": {"home": 1, "away": 0},
}


def score_message(match: str, score: dict[str, int]) -> rv.Message:
    return rv.Message(f"SOCCER.STATE.LATESTSCORE.{match}", score)


async def results_service(
    transport: rv.Transport, run: int, goals: int, stop: asyncio.Event
) -> dict[str, dict[str, int]]:
    """Process ``goals`` goal events; on start, recover the scores the caches retain."""
    # Subscribed before asking the caches: no event published from here on is missed.
    events = transport.listen(EVENTS, correlation_id=f"events-run{run}")
    scores: dict[str, dict[str, int]] = {}
    for msg in await transport.request_retained(SCORES, timeout=WAIT):
        match = msg.subject.rsplit(".", 1)[1]
        scores[match] = {"home": msg["home"], "away": msg["away"]}
    print(f"service run {run}: recovered {scores or 'nothing'}")
    stop.set()  # ready: the events may come
    for _ in range(goals):
        event = await events.get(WAIT)
        match = event.subject.rsplit(".", 1)[1]
        score = scores.setdefault(match, {"home": 0, "away": 0})
        score[event["side"]] += 1
        await transport.send(score_message(match, score))
        print(f"service run {run}: {match} {score['home']}-{score['away']}")
    await events.close()
    return scores


async def scoreboard(transport: rv.Transport, final: dict[str, str]) -> int:
    """Show every score (the retained ones first, then each change) and count goals.

    Stops once the board shows ``final`` and every goal of the second half was seen.
    """
    queue = rv.Queue(name="scoreboard")
    transport.listen(SCORES, queue=queue, retained=True, correlation_id="state")
    transport.listen(EVENTS, queue=queue, correlation_id="goals")
    board: dict[str, str] = {}
    goals = 0
    while board != final or goals < len(SECOND_HALF):
        msg = await queue.get(WAIT)
        if msg.correlation_id == "state":
            board[msg.subject.rsplit(".", 1)[1]] = f"{msg['home']}-{msg['away']}"
            print(f"scoreboard: {board}")
        else:
            goals += 1
    return goals


async def play(transport: rv.Transport, goals: list[tuple[str, str]], ready: asyncio.Event):
    await asyncio.wait_for(ready.wait(), WAIT)
    for match, side in goals:
        await transport.send(rv.Message(f"SOCCER.EVENT.{match}", {"side": side}))


async def main() -> int:
    service = str(free_port())
    store = Path(tempfile.mkdtemp(prefix="rvasync-results-")) / "scores.store"
    async with (
        rv.Transport(service, description="cache") as cache_side,
        rv.CurrentValueCache(cache_side, SCORES, store=store),
        rv.Transport(service, description="results service") as service_side,
        rv.Transport(service, description="pitch") as pitch,
        rv.Transport(service, description="scoreboard") as board_side,
    ):
        ready = asyncio.Event()
        first, _ = await asyncio.gather(
            results_service(service_side, 1, len(FIRST_HALF), ready),
            play(pitch, FIRST_HALF, ready),
        )
        # The service stops here; every score it published is retained.
        ready = asyncio.Event()
        second, _, goals = await asyncio.gather(
            results_service(service_side, 2, len(SECOND_HALF), ready),
            play(pitch, SECOND_HALF, ready),
            scoreboard(board_side, {m: f"{s['home']}-{s['away']}" for m, s in EXPECTED.items()}),
        )
    ok = second == EXPECTED and first["FRA-ARG"] == {"home": 2, "away": 0}
    ok = ok and goals == len(SECOND_HALF)
    print("final scores:", second, "OK" if ok else "WRONG")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
