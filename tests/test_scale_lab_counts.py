"""The lab scale sweep's peers count lost messages from every DATALOSS advisory kind.

A subscriber's figure "every message delivered or counted" adds the messages its
DATALOSS advisories name: a daemon's inbound loss, a router's loss (the routers
part of the sweep), and never the datagrams another host asked this one for in
vain (that loss is counted by the host that missed them, as messages).
"""

from __future__ import annotations

from rvasync.advmsg import SYSTEM, AdvisoryClass, make_advisory
from rvasync.daemon import advisories as adv
from rvasync.fieldtypes import FieldType
from tests.lab.scalepeer import lost_messages


def test_a_daemons_inbound_loss_counts_its_messages_not_its_datagrams() -> None:
    msg = adv.data_loss("INBOUND", False, "10.0.0.2", 7, peer=("10.0.0.2", 7500), messages=3)
    assert lost_messages(msg) == 3


def test_a_routers_loss_counts_the_messages_it_could_not_forward() -> None:
    fields = [
        ("router", "r1", FieldType.STRING),
        ("lost", 5, FieldType.U32),
        ("reason", "link to r2 cannot take it", FieldType.STRING),
    ]
    msg = make_advisory(AdvisoryClass.ERROR, SYSTEM, "DATALOSS.ROUTER", fields=fields)
    assert lost_messages(msg) == 5


def test_datagrams_asked_for_in_vain_are_counted_where_they_were_missed() -> None:
    assert lost_messages(adv.data_loss("OUTBOUND", False, "10.0.0.3", 4)) == 0
    unknown = adv.data_loss("OUTBOUND", True, "10.0.0.9", 1, messages=1, unknown_address=1)
    assert lost_messages(unknown) == 1
