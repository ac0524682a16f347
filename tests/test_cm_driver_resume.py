"""Persistent correspondents across restarts: what resumes, what is remembered, what is not kept.

* Issue 34 item 2: a restarted sender owing messages to a listener that is
  already running delivers them without sending anything new.
* Issue 44 item 8: confirmations made out of order (6 to 20 while 5 is still
  being worked on) survive a listener restart: only 5 comes again.
* Issue 44 item 6: certified request/reply does not leave one ledger entry
  per reply inbox.

Restarts run two CmTransport instances one after the other in one event
loop; ``crash`` stops the first the way kill -9 would.
"""

from __future__ import annotations

import pytest
from cm_driver_support import FAST, crash, review, until

from rvasync.cmdriver import CmTransport
from rvasync.message import Message
from rvasync.protocol.cm import decode_ledger

WAIT = 5.0


@pytest.fixture
async def t(rv_process_transport):
    return rv_process_transport


async def test_a_restarted_sender_delivers_what_it_owes_without_a_new_message(t, tmp_path):
    path = tmp_path / "jan.ledger"
    jan = CmTransport(t, "JAN_PER", ledger=path, timing=FAST)
    await jan.open()
    await jan.add_listener("DB_PER", "STORE.THIS")
    for n in range(5):
        await jan.send(Message("STORE.THIS", {"n": n}))
    await jan.sync()
    await crash(jan)
    # The listener starts while the sender is down: its announcement goes unheard.
    db = CmTransport(t, "DB_PER", ledger=tmp_path / "db.ledger", require_old=True, timing=FAST)
    await db.open()
    listener = db.listen("STORE.THIS")
    jan = CmTransport(t, "JAN_PER", ledger=path, timing=FAST)
    await jan.open()  # and sends nothing
    got = [await listener.get(WAIT) for _ in range(5)]
    assert [(m["n"], m.cm.sequence) for m in got] == [(n, n + 1) for n in range(5)]
    await listener.close()
    await until(lambda: review(jan, "STORE.THIS").total_messages == 0, WAIT)
    await jan.close()
    await db.close()


async def test_a_restarted_sender_reaches_a_listener_it_knew_without_a_new_message(t, tmp_path):
    path = tmp_path / "joe.ledger"
    joe = CmTransport(t, "JOE_PER", ledger=path, timing=FAST)
    await joe.open()
    sue = CmTransport(t, "SUE_PER", require_old=True, timing=FAST)
    listener = sue.listen("FOO", explicit_confirm=True)
    await joe.send(Message("FOO", {"n": 0}))
    await until(lambda: review(joe, "FOO").listeners, WAIT)
    for n in range(1, 6):
        await joe.send(Message("FOO", {"n": n}))
    got = [await listener.get(WAIT) for _ in range(6)]
    await crash(joe)
    for msg in got:
        await listener.confirm(msg)  # confirmations the dead instance never hears
    joe = CmTransport(t, "JOE_PER", ledger=path, timing=FAST)
    await joe.open()
    await until(lambda: review(joe, "FOO").total_messages == 0, WAIT)
    await joe.close()
    await sue.close()


async def test_out_of_order_confirmations_survive_a_listener_restart(t, tmp_path):
    joe = CmTransport(t, "JOE", timing=FAST)
    sue_path = tmp_path / "sue.ledger"
    sue = CmTransport(t, "SUE_PER", ledger=sue_path, require_old=True, timing=FAST)
    await sue.open()
    await joe.add_listener("SUE_PER", "FOO")
    listener = sue.listen("FOO", explicit_confirm=True)
    for n in range(1, 21):
        await joe.send(Message("FOO", {"n": n}))
    got = [await listener.get(WAIT) for _ in range(20)]
    assert [m.cm.sequence for m in got] == list(range(1, 21))
    for msg in got:
        if msg.cm.sequence != 5:
            await listener.confirm(msg)  # 1-4 and 6-20; 5 is still being worked on
    await until(lambda: review(joe, "FOO").listeners[0].last_confirmed == 4, WAIT)
    await sue.sync()
    await crash(sue)
    sue = CmTransport(t, "SUE_PER", ledger=sue_path, require_old=True, timing=FAST)
    await sue.open()
    listener = sue.listen("FOO", explicit_confirm=True)
    again = await listener.get(WAIT)
    assert (again["n"], again.cm.sequence) == (5, 5)
    with pytest.raises(TimeoutError):
        await listener.get(0.5)  # 6 to 20 were confirmed: not delivered again
    await listener.confirm(again)
    await until(lambda: review(joe, "FOO").listeners[0].last_confirmed == 20, WAIT)
    await until(lambda: review(joe, "FOO").total_messages == 0, WAIT)
    await joe.close()
    await sue.close()


async def test_certified_replies_to_inboxes_leave_nothing_in_the_ledger(t, tmp_path):
    path = tmp_path / "server.ledger"
    server = CmTransport(t, "SERVER", ledger=path, timing=FAST)
    await server.open()
    client = CmTransport(t, "CLIENT", timing=FAST)

    async def answer(msg):
        await server.send_reply(Message(None, {"answer": msg["q"] * 2}), msg)

    server.listen("ASK", callback=answer)
    for q in range(300):
        reply = await client.send_request(Message("ASK", {"q": q}), timeout=WAIT)
        assert reply["answer"] == 2 * q
    assert not server.review_ledger("_INBOX.>")
    await server.sync()
    await server.compact_ledger()
    await server.close()
    state = decode_ledger(path.read_bytes(), expected_name="SERVER").state
    assert not [s for s in state.subjects if s.startswith("_INBOX.")]
    await client.close()
