"""Every advisory's subject, fields, field types and wire bytes, pinned.

The advisories are built through the paths the library presents them by
(protocol cores' ``to_message``, the daemon's builders, ``build_advisory``);
the expected values were taken from the builders before they were unified in
:mod:`rvasync.advmsg`, so any change to what programs receive shows here.
"""

from ipaddress import IPv4Address

import pytest

from rvasync.advisories import build_advisory
from rvasync.advmsg import RVFT, advisory_message, advisory_subject, make_advisory
from rvasync.daemon import advisories as dadv
from rvasync.fieldtypes import FieldType
from rvasync.message import Message
from rvasync.protocol import ft
from rvasync.protocol.cm import advisories as cadv
from rvasync.queues import LimitPolicy, Queue
from rvasync.transport.process import limit_exceeded_advisory


def _cm_cases() -> dict[str, Message]:
    data = Message("ORDERS.NEW", {"qty": 3}).to_bytes()
    values = {
        "cm.delivery_confirm": cadv.delivery_confirm("ORDERS.NEW", "LIS", 7),
        "cm.delivery_complete": cadv.delivery_complete("ORDERS.NEW", 7),
        "cm.delivery_no_response": cadv.delivery_no_response("LIS.A"),
        "cm.delivery_failed": cadv.delivery_failed("ORDERS.NEW", 9, data, ["L1", "L2"]),
        "cm.delivery_failed_bad": cadv.delivery_failed("ORDERS.NEW", 9, b"junk", []),
        "cm.delivery_unavailable": cadv.delivery_unavailable("ORDERS.NEW", 3, 4, "SND"),
        "cm.registration_request": cadv.registration_request("ORDERS.NEW", "LIS"),
        "cm.registration_certified": cadv.registration_certified("ORDERS.NEW", "SND", 5),
        "cm.registration_not_certified": cadv.registration_not_certified("ORDERS.NEW", "SND"),
        "cm.registration_no_response": cadv.registration_no_response("ORDERS.NEW", "SND"),
        "cm.registration_closed": cadv.registration_closed("ORDERS.NEW", "LIS", 10, 8),
        "cm.registration_discovery": cadv.registration_discovery("ORDERS.NEW", "SND"),
        "cm.registration_moved": cadv.registration_moved("SND.X"),
        "cm.collision": cadv.collision("SND.X"),
        "cm.ledger_write_failed": cadv.ledger_write_failed("SND", "/l", "ENOSPC", True),
        "cm.ledger_write_resumed": cadv.ledger_write_resumed("SND", "/l"),
        "cm.ledger_compaction_failed": cadv.ledger_compaction_failed("SND", "/l", "ENOSPC"),
    }
    return {name: advisory.to_message() for name, advisory in values.items()}


def _system_cases() -> dict[str, Message]:
    return {
        "sys.data_loss": dadv.data_loss("INBOUND", False, "10.0.0.1", 4, messages=2),
        "sys.data_loss_ptp": dadv.data_loss("OUTBOUND", True, "10.0.0.2", 1),
        "sys.msg_too_large": dadv.msg_too_large("10.0.0.1", 3, 70_000_000),
        "sys.msg_too_large_nosize": dadv.msg_too_large("10.0.0.1", 3, None),
        "sys.retransmission": dadv.retransmission("INBOUND.EXPECTED", "10.0.0.1", 5),
        "sys.unreachable_transport": dadv.unreachable_transport("0A000001.1", "closed"),
        "sys.unreachable_transport_nodesc": dadv.unreachable_transport("0A000001.1", None),
        "sys.unreachable_daemon": dadv.unreachable_daemon("0A000001", "10.0.0.1", "silent"),
        "sys.host_status": dadv.host_status(
            "10.0.0.1", [("ver", "1.0", None), ("up", 5, FieldType.U32)]
        ),
        "sys.slow_consumer": dadv.slow_consumer(3, 2, 100, "size limit"),
        "sys.fast_producer": dadv.fast_producer(7),
        "sys.queue_limit": limit_exceeded_advisory(
            Queue(limit=2, policy=LimitPolicy.DISCARD_NEW, name="q1"), 1
        ),
        "sys.rvd_disconnected": build_advisory(
            "WARN", "RVD.DISCONNECTED", {"daemon": "tcp:1", "reason": "eof"}
        ),
        "sys.rvd_reconnect_failed": build_advisory(
            "ERROR", "RVD.RECONNECT_FAILED", {"daemon": "tcp:1", "attempts": 3, "reason": "x"}
        ),
        "sys.rvd_connected": build_advisory(
            "INFO", "RVD.CONNECTED", {"daemon": "tcp:1", "attempts": 3}
        ),
    }


def _ft_values() -> dict[str, ft.FtAdvisory]:
    from rvasync.protocol.ft import advisories as fadv

    return {
        "ft.param_mismatch": fadv.param_mismatch(
            "ERROR", "DBQ.PARTS", ft.DESC_ACTIVE_GOAL_DIFFERS, "m2"
        ),
        "ft.param_mismatch_warn": fadv.param_mismatch("WARN", "G", ft.DESC_HEARTBEAT_DIFFERS, "m2"),
        "ft.disabling_member": fadv.disabling_member("G"),
        "ft.too_many_active": ft.FtAdvisory(
            "WARN", ft.TOO_MANY_ACTIVE, "G", "2 members are active", "m3"
        ),
        "ft.too_few_active": ft.FtAdvisory("WARN", ft.TOO_FEW_ACTIVE, "G.H", "0 active"),
    }


def _all_cases() -> dict[str, Message]:
    cases = _cm_cases()
    cases.update(_system_cases())
    cases.update({name: value.to_message() for name, value in _ft_values().items()})
    return cases


EXPECTED = {
    "cm.collision": ("_RV.ERROR.RVCM.REGISTRATION.COLLISION.SND.X", [("name", "STRING", "SND.X")]),
    "cm.ledger_write_failed": (
        "_RV.ERROR.RVCM.LEDGER.WRITE_FAILED.SND",
        [
            ("name", "STRING", "SND"),
            ("ledger", "STRING", "/l"),
            ("error", "STRING", "ENOSPC"),
            ("retrying", "U64", 1),
        ],
    ),
    "cm.ledger_write_resumed": (
        "_RV.INFO.RVCM.LEDGER.WRITE_RESUMED.SND",
        [("name", "STRING", "SND"), ("ledger", "STRING", "/l")],
    ),
    "cm.ledger_compaction_failed": (
        "_RV.WARN.RVCM.LEDGER.COMPACTION_FAILED.SND",
        [("name", "STRING", "SND"), ("ledger", "STRING", "/l"), ("error", "STRING", "ENOSPC")],
    ),
    "cm.delivery_complete": (
        "_RV.INFO.RVCM.DELIVERY.COMPLETE.ORDERS.NEW",
        [("subject", "STRING", "ORDERS.NEW"), ("seqno", "U64", 7)],
    ),
    "cm.delivery_confirm": (
        "_RV.INFO.RVCM.DELIVERY.CONFIRM.ORDERS.NEW",
        [("subject", "STRING", "ORDERS.NEW"), ("listener", "STRING", "LIS"), ("seqno", "U64", 7)],
    ),
    "cm.delivery_failed": (
        "_RV.ERROR.RVCM.DELIVERY.FAILED.ORDERS.NEW",
        [
            ("subject", "STRING", "ORDERS.NEW"),
            ("seqno", "U64", 9),
            ("data", "MSG", "c152560194aa4f52444552532e4e4557c0c094a3717479001403"),
            ("listener", "STRING", "L1"),
            ("listener", "STRING", "L2"),
        ],
    ),
    "cm.delivery_failed_bad": (
        "_RV.ERROR.RVCM.DELIVERY.FAILED.ORDERS.NEW",
        [("subject", "STRING", "ORDERS.NEW"), ("seqno", "U64", 9), ("data", "OPAQUE", "6a756e6b")],
    ),
    "cm.delivery_no_response": (
        "_RV.WARN.RVCM.DELIVERY.NO_RESPONSE.LIS.A",
        [("listener", "STRING", "LIS.A")],
    ),
    "cm.delivery_unavailable": (
        "_RV.ERROR.RVCM.DELIVERY.UNAVAILABLE.ORDERS.NEW",
        [
            ("subject", "STRING", "ORDERS.NEW"),
            ("seqno_begin", "U64", 3),
            ("seqno_end", "U64", 4),
            ("sender", "STRING", "SND"),
        ],
    ),
    "cm.registration_certified": (
        "_RV.INFO.RVCM.REGISTRATION.CERTIFIED.ORDERS.NEW",
        [
            ("subject", "STRING", "ORDERS.NEW"),
            ("sender", "STRING", "SND"),
            ("seqno_begin", "U64", 5),
        ],
    ),
    "cm.registration_closed": (
        "_RV.INFO.RVCM.REGISTRATION.CLOSED.ORDERS.NEW",
        [
            ("subject", "STRING", "ORDERS.NEW"),
            ("listener", "STRING", "LIS"),
            ("seqno_last_sent", "U64", 10),
            ("seqno_last_confirmed", "U64", 8),
        ],
    ),
    "cm.registration_discovery": (
        "_RV.INFO.RVCM.REGISTRATION.DISCOVERY.ORDERS.NEW",
        [("subject", "STRING", "ORDERS.NEW"), ("sender", "STRING", "SND")],
    ),
    "cm.registration_moved": (
        "_RV.INFO.RVCM.REGISTRATION.MOVED.SND.X",
        [("name", "STRING", "SND.X")],
    ),
    "cm.registration_no_response": (
        "_RV.WARN.RVCM.REGISTRATION.NO_RESPONSE.ORDERS.NEW",
        [("subject", "STRING", "ORDERS.NEW"), ("sender", "STRING", "SND")],
    ),
    "cm.registration_not_certified": (
        "_RV.WARN.RVCM.REGISTRATION.NOT_CERTIFIED.ORDERS.NEW",
        [("subject", "STRING", "ORDERS.NEW"), ("sender", "STRING", "SND")],
    ),
    "cm.registration_request": (
        "_RV.INFO.RVCM.REGISTRATION.REQUEST.ORDERS.NEW",
        [("subject", "STRING", "ORDERS.NEW"), ("listener", "STRING", "LIS")],
    ),
    "ft.disabling_member": ("_RV.ERROR.RVFT.DISABLING_MEMBER.G", []),
    "ft.param_mismatch": (
        "_RV.ERROR.RVFT.PARAM_MISMATCH.DBQ.PARTS",
        [("RVADV_DESC", "STRING", "Active goal differs")],
    ),
    "ft.param_mismatch_warn": (
        "_RV.WARN.RVFT.PARAM_MISMATCH.G",
        [("RVADV_DESC", "STRING", "Heartbeat interval differs")],
    ),
    "ft.too_few_active": (
        "_RV.WARN.RVFT.TOO_FEW_ACTIVE.G.H",
        [("RVADV_DESC", "STRING", "0 active")],
    ),
    "ft.too_many_active": (
        "_RV.WARN.RVFT.TOO_MANY_ACTIVE.G",
        [("RVADV_DESC", "STRING", "2 members are active")],
    ),
    "sys.data_loss": (
        "_RV.ERROR.SYSTEM.DATALOSS.INBOUND.BCAST",
        [("host", "IPADDR32", "10.0.0.1"), ("lost", "U32", 4), ("messages", "U32", 2)],
    ),
    "sys.data_loss_ptp": (
        "_RV.ERROR.SYSTEM.DATALOSS.OUTBOUND.PTP",
        [("host", "IPADDR32", "10.0.0.2"), ("lost", "U32", 1)],
    ),
    "sys.fast_producer": ("_RV.WARN.SYSTEM.CLIENT.FASTPRODUCER", [("waiting", "U32", 7)]),
    "sys.host_status": (
        "_RV.INFO.SYSTEM.HOST.STATUS.0A000001",
        [("ver", "STRING", "1.0"), ("up", "U32", 5)],
    ),
    "sys.msg_too_large": (
        "_RV.ERROR.SYSTEM.DATALOSS.MSG_TOO_LARGE",
        [("host", "IPADDR32", "10.0.0.1"), ("lost", "U32", 3), ("size", "U64", 70000000)],
    ),
    "sys.msg_too_large_nosize": (
        "_RV.ERROR.SYSTEM.DATALOSS.MSG_TOO_LARGE",
        [("host", "IPADDR32", "10.0.0.1"), ("lost", "U32", 3)],
    ),
    "sys.queue_limit": (
        "_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED",
        [
            ("ADV_DESC", "STRING", "q1"),
            ("count", "U32", 1),
            ("discarded", "U32", 0),
            ("limit", "U32", 2),
        ],
    ),
    "sys.retransmission": (
        "_RV.INFO.SYSTEM.RETRANSMISSION.INBOUND.EXPECTED",
        [("host", "IPADDR32", "10.0.0.1"), ("lost", "U32", 5)],
    ),
    "sys.rvd_connected": (
        "_RV.INFO.SYSTEM.RVD.CONNECTED",
        [("daemon", "STRING", "tcp:1"), ("attempts", "I64", 3)],
    ),
    "sys.rvd_disconnected": (
        "_RV.WARN.SYSTEM.RVD.DISCONNECTED",
        [("daemon", "STRING", "tcp:1"), ("reason", "STRING", "eof")],
    ),
    "sys.rvd_reconnect_failed": (
        "_RV.ERROR.SYSTEM.RVD.RECONNECT_FAILED",
        [("daemon", "STRING", "tcp:1"), ("attempts", "I64", 3), ("reason", "STRING", "x")],
    ),
    "sys.slow_consumer": (
        "_RV.ERROR.SYSTEM.CLIENT.SLOWCONSUMER",
        [
            ("waiting", "U32", 3),
            ("dropped", "U32", 2),
            ("bytes_dropped", "U64", 100),
            ("reason", "STRING", "size limit"),
        ],
    ),
    "sys.unreachable_daemon": (
        "_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.0A000001",
        [
            ("tport", "STRING", "0A000001"),
            ("host", "IPADDR32", "10.0.0.1"),
            ("reason", "STRING", "silent"),
        ],
    ),
    "sys.unreachable_transport": (
        "_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.0A000001.1",
        [("tport", "STRING", "0A000001.1"), ("descr", "STRING", "closed")],
    ),
    "sys.unreachable_transport_nodesc": (
        "_RV.INFO.SYSTEM.UNREACHABLE.TRANSPORT.0A000001.1",
        [("tport", "STRING", "0A000001.1")],
    ),
}

WIRE = {
    "cm.ledger_write_failed": (
        "c152560194d9265f52562e4552524f522e5256434d2e4c45444745522e57524954455f4641494c45442e"
        "534e44c0c0dc0010a46e616d650008a3534e44a66c65646765720008a22f6ca56572726f720008a645"
        "4e4f535043a87265747279696e67001501"
    ),
    "cm.ledger_write_resumed": (
        "c152560194d9265f52562e494e464f2e5256434d2e4c45444745522e57524954455f524553554d4544"
        "2e534e44c0c098a46e616d650008a3534e44a66c65646765720008a22f6c"
    ),
    "cm.ledger_compaction_failed": (
        "c152560194d92a5f52562e5741524e2e5256434d2e4c45444745522e434f4d50414354494f4e5f4641"
        "494c45442e534e44c0c09ca46e616d650008a3534e44a66c65646765720008a22f6ca56572726f7200"
        "08a6454e4f535043"
    ),
    "cm.collision": (
        "c152560194d92b5f52562e4552524f522e5256434d2e524547495354524154494f4e2e434f4c4c49"
        "53494f4e2e534e442e58c0c094a46e616d650008a5534e442e58"
    ),
    "cm.delivery_complete": (
        "c152560194d92a5f52562e494e464f2e5256434d2e44454c49564552592e434f4d504c4554452e4f"
        "52444552532e4e4557c0c098a77375626a6563740008aa4f52444552532e4e4557a57365716e6f00"
        "1507"
    ),
    "cm.delivery_confirm": (
        "c152560194d9295f52562e494e464f2e5256434d2e44454c49564552592e434f4e4649524d2e4f52"
        "444552532e4e4557c0c09ca77375626a6563740008aa4f52444552532e4e4557a86c697374656e65"
        "720008a34c4953a57365716e6f001507"
    ),
    "cm.delivery_failed": (
        "c152560194d9295f52562e4552524f522e5256434d2e44454c49564552592e4641494c45442e4f52"
        "444552532e4e4557c0c0dc0014a77375626a6563740008aa4f52444552532e4e4557a57365716e6f"
        "001509a464617461000194aa4f52444552532e4e4557c0c094a3717479001403a86c697374656e65"
        "720008a24c31a86c697374656e65720008a24c32"
    ),
    "cm.delivery_failed_bad": (
        "c152560194d9295f52562e4552524f522e5256434d2e44454c49564552592e4641494c45442e4f52"
        "444552532e4e4557c0c09ca77375626a6563740008aa4f52444552532e4e4557a57365716e6f0015"
        "09a4646174610007c4046a756e6b"
    ),
    "cm.delivery_no_response": (
        "c152560194d9285f52562e5741524e2e5256434d2e44454c49564552592e4e4f5f524553504f4e53"
        "452e4c49532e41c0c094a86c697374656e65720008a54c49532e41"
    ),
    "cm.delivery_unavailable": (
        "c152560194d92e5f52562e4552524f522e5256434d2e44454c49564552592e554e415641494c4142"
        "4c452e4f52444552532e4e4557c0c0dc0010a77375626a6563740008aa4f52444552532e4e4557ab"
        "7365716e6f5f626567696e001503a97365716e6f5f656e64001504a673656e6465720008a3534e44"
    ),
    "cm.registration_certified": (
        "c152560194d92f5f52562e494e464f2e5256434d2e524547495354524154494f4e2e434552544946"
        "4945442e4f52444552532e4e4557c0c09ca77375626a6563740008aa4f52444552532e4e4557a673"
        "656e6465720008a3534e44ab7365716e6f5f626567696e001505"
    ),
    "cm.registration_closed": (
        "c152560194d92c5f52562e494e464f2e5256434d2e524547495354524154494f4e2e434c4f534544"
        "2e4f52444552532e4e4557c0c0dc0010a77375626a6563740008aa4f52444552532e4e4557a86c69"
        "7374656e65720008a34c4953af7365716e6f5f6c6173745f73656e7400150ab47365716e6f5f6c61"
        "73745f636f6e6669726d6564001508"
    ),
    "cm.registration_discovery": (
        "c152560194d92f5f52562e494e464f2e5256434d2e524547495354524154494f4e2e444953434f56"
        "4552592e4f52444552532e4e4557c0c098a77375626a6563740008aa4f52444552532e4e4557a673"
        "656e6465720008a3534e44"
    ),
    "cm.registration_moved": (
        "c152560194d9265f52562e494e464f2e5256434d2e524547495354524154494f4e2e4d4f5645442e"
        "534e442e58c0c094a46e616d650008a5534e442e58"
    ),
    "cm.registration_no_response": (
        "c152560194d9315f52562e5741524e2e5256434d2e524547495354524154494f4e2e4e4f5f524553"
        "504f4e53452e4f52444552532e4e4557c0c098a77375626a6563740008aa4f52444552532e4e4557"
        "a673656e6465720008a3534e44"
    ),
    "cm.registration_not_certified": (
        "c152560194d9335f52562e5741524e2e5256434d2e524547495354524154494f4e2e4e4f545f4345"
        "525449464945442e4f52444552532e4e4557c0c098a77375626a6563740008aa4f52444552532e4e"
        "4557a673656e6465720008a3534e44"
    ),
    "cm.registration_request": (
        "c152560194d92d5f52562e494e464f2e5256434d2e524547495354524154494f4e2e524551554553"
        "542e4f52444552532e4e4557c0c098a77375626a6563740008aa4f52444552532e4e4557a86c6973"
        "74656e65720008a34c4953"
    ),
    "ft.disabling_member": (
        "c152560194d9215f52562e4552524f522e525646542e44495341424c494e475f4d454d4245522e47c0c090"
    ),
    "ft.param_mismatch": (
        "c152560194d9275f52562e4552524f522e525646542e504152414d5f4d49534d415443482e444251"
        "2e5041525453c0c094aa52564144565f444553430008b341637469766520676f616c206469666665"
        "7273"
    ),
    "ft.param_mismatch_warn": (
        "c152560194be5f52562e5741524e2e525646542e504152414d5f4d49534d415443482e47c0c094aa"
        "52564144565f444553430008ba48656172746265617420696e74657276616c2064696666657273"
    ),
    "ft.too_few_active": (
        "c152560194d9205f52562e5741524e2e525646542e544f4f5f4645575f4143544956452e472e48c0"
        "c094aa52564144565f444553430008a83020616374697665"
    ),
    "ft.too_many_active": (
        "c152560194bf5f52562e5741524e2e525646542e544f4f5f4d414e595f4143544956452e47c0c094"
        "aa52564144565f444553430008b432206d656d626572732061726520616374697665"
    ),
    "sys.data_loss": (
        "c152560194d9275f52562e4552524f522e53595354454d2e444154414c4f53532e494e424f554e44"
        "2e4243415354c0c09ca4686f7374001bc4040a000001a46c6f7374001304a86d6573736167657300"
        "1302"
    ),
    "sys.data_loss_ptp": (
        "c152560194d9265f52562e4552524f522e53595354454d2e444154414c4f53532e4f5554424f554e"
        "442e505450c0c098a4686f7374001bc4040a000002a46c6f7374001301"
    ),
    "sys.fast_producer": (
        "c152560194d9235f52562e5741524e2e53595354454d2e434c49454e542e4641535450524f445543"
        "4552c0c094a777616974696e67001307"
    ),
    "sys.host_status": (
        "c152560194d9245f52562e494e464f2e53595354454d2e484f53542e5354415455532e3041303030"
        "303031c0c098a37665720008a3312e30a27570001305"
    ),
    "sys.msg_too_large": (
        "c152560194d9275f52562e4552524f522e53595354454d2e444154414c4f53532e4d53475f544f4f"
        "5f4c41524745c0c09ca4686f7374001bc4040a000001a46c6f7374001303a473697a650015ce042c"
        "1d80"
    ),
    "sys.msg_too_large_nosize": (
        "c152560194d9275f52562e4552524f522e53595354454d2e444154414c4f53532e4d53475f544f4f"
        "5f4c41524745c0c098a4686f7374001bc4040a000001a46c6f7374001303"
    ),
    "sys.queue_limit": (  # rvasync adds count, discarded and limit after the spec's ADV_DESC
        "c152560194d9245f52562e5741524e2e53595354454d2e51554555452e4c494d49545f4558434545"
        "444544c0c0dc0010a84144565f444553430008a27131a5636f756e74001301a96469736361726465"
        "64001300a56c696d6974001302"
    ),
    "sys.retransmission": (
        "c152560194d92f5f52562e494e464f2e53595354454d2e52455452414e534d495353494f4e2e494e"
        "424f554e442e4558504543544544c0c098a4686f7374001bc4040a000001a46c6f7374001305"
    ),
    "sys.rvd_connected": (
        "c152560194bd5f52562e494e464f2e53595354454d2e5256442e434f4e4e4543544544c0c098a664"
        "61656d6f6e0008a57463703a31a8617474656d707473001403"
    ),
    "sys.rvd_disconnected": (
        "c152560194d9205f52562e5741524e2e53595354454d2e5256442e444953434f4e4e4543544544c0"
        "c098a66461656d6f6e0008a57463703a31a6726561736f6e0008a3656f66"
    ),
    "sys.rvd_reconnect_failed": (
        "c152560194d9255f52562e4552524f522e53595354454d2e5256442e5245434f4e4e4543545f4641"
        "494c4544c0c09ca66461656d6f6e0008a57463703a31a8617474656d707473001403a6726561736f"
        "6e0008a178"
    ),
    "sys.slow_consumer": (
        "c152560194d9245f52562e4552524f522e53595354454d2e434c49454e542e534c4f57434f4e5355"
        "4d4552c0c0dc0010a777616974696e67001303a764726f70706564001302ad62797465735f64726f"
        "70706564001564a6726561736f6e0008aa73697a65206c696d6974"
    ),
    "sys.unreachable_daemon": (
        "c152560194d92e5f52562e494e464f2e53595354454d2e554e524541434841424c452e5452414e53"
        "504f52542e3041303030303031c0c09ca574706f72740008a83041303030303031a4686f7374001b"
        "c4040a000001a6726561736f6e0008a673696c656e74"
    ),
    "sys.unreachable_transport": (
        "c152560194d9305f52562e494e464f2e53595354454d2e554e524541434841424c452e5452414e53"
        "504f52542e30413030303030312e31c0c098a574706f72740008aa30413030303030312e31a56465"
        "7363720008a6636c6f736564"
    ),
    "sys.unreachable_transport_nodesc": (
        "c152560194d9305f52562e494e464f2e53595354454d2e554e524541434841424c452e5452414e53"
        "504f52542e30413030303030312e31c0c094a574706f72740008aa30413030303030312e31"
    ),
}


def _plain(value: object) -> object:
    if isinstance(value, Message):
        return value.to_bytes().hex()
    if isinstance(value, IPv4Address):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def _dump(msg: Message) -> tuple:
    return (msg.subject, [(f.name, f.type.name, _plain(f.value)) for f in msg])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_subject_fields_and_types(name):
    assert _dump(_all_cases()[name]) == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(WIRE))
def test_wire_bytes(name):
    assert _all_cases()[name].to_bytes().hex() == WIRE[name]


def test_every_case_is_pinned():
    assert set(_all_cases()) == set(EXPECTED) == set(WIRE)


def test_ft_driver_form_matches_to_message():
    # ftdriver presents Message(advisory.subject, advisory.fields()); same bytes.
    for advisory in _ft_values().values():
        direct = Message(advisory.subject, advisory.fields()).to_bytes()
        assert direct == advisory.to_message().to_bytes()


def test_builder_parts_and_field_forms():
    assert advisory_subject("WARN", RVFT, "PARAM_MISMATCH", "A.B") == (
        "_RV.WARN.RVFT.PARAM_MISMATCH.A.B"
    )
    assert advisory_subject("INFO", "SYSTEM", "HOST.STATUS", "0A", "X") == (
        "_RV.INFO.SYSTEM.HOST.STATUS.0A.X"
    )
    typed = make_advisory("INFO", "SYSTEM", "X", fields=[("n", 1, FieldType.U32), ("s", "v")])
    mapped = make_advisory("INFO", "SYSTEM", "X", fields={"n": 1})
    assert [(f.name, f.type) for f in typed] == [("n", FieldType.U32), ("s", FieldType.STRING)]
    assert [(f.name, f.type) for f in mapped] == [("n", FieldType.I64)]
    assert advisory_message("_RV.INFO.SYSTEM.X", list(typed)).to_bytes() == typed.to_bytes()
    with pytest.raises(ValueError):
        advisory_subject("DEBUG", "SYSTEM", "X")
