"""Advisory subjects and messages."""

import pytest

from rvasync.advisories import (
    AdvisoryClass,
    advisory_subject,
    build_advisory,
    log_unheard,
    parse_advisory_subject,
)


def test_subject_template():
    assert advisory_subject("WARN", "SYSTEM", "QUEUE.LIMIT_EXCEEDED") == (
        "_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED"
    )
    assert advisory_subject(AdvisoryClass.INFO, "RVCM", "DELIVERY.CONFIRM.A.B") == (
        "_RV.INFO.RVCM.DELIVERY.CONFIRM.A.B"
    )


@pytest.mark.parametrize(
    ("cls", "source", "name"),
    [("DEBUG", "SYSTEM", "X"), ("INFO", "", "X"), ("INFO", "A.B", "X"), ("INFO", "S", "A..B")],
)
def test_bad_parts(cls, source, name):
    with pytest.raises(ValueError):
        advisory_subject(cls, source, name)


def test_parse_round_trip():
    subject = advisory_subject("ERROR", "SYSTEM", "DATALOSS.INBOUND.BCAST")
    assert parse_advisory_subject(subject) == (
        AdvisoryClass.ERROR,
        "SYSTEM",
        "DATALOSS.INBOUND.BCAST",
    )
    assert parse_advisory_subject("ORDERS.NEW") is None
    assert parse_advisory_subject("_RV.BOGUS.SYSTEM.X") is None
    assert parse_advisory_subject("_RV.INFO.SYSTEM") is None


def test_build_has_fields():
    msg = build_advisory("WARN", "QUEUE.LIMIT_EXCEEDED", {"ADV_DESC": "q1"})
    assert msg.subject == "_RV.WARN.SYSTEM.QUEUE.LIMIT_EXCEEDED"
    assert msg["ADV_DESC"] == "q1"


def test_unheard_error_and_warn_are_logged_info_is_not(capsys):
    log_unheard(build_advisory("ERROR", "DATALOSS", {"lost": 3, "event": "clash"}))
    log_unheard(build_advisory("INFO", "HOST.STATUS", {"ignored": 1}))
    err = capsys.readouterr().err
    assert "_RV.ERROR.SYSTEM.DATALOSS" in err and "lost" in err
    assert "HOST.STATUS" not in err
