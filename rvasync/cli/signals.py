"""What INT, TERM and HUP do to the long-running commands (daemon, router, relay, cache).

One rule for all of them (docs/cli.md, "Signals"):

* **SIGINT, SIGTERM**: stop cleanly: the command says goodbye to its peers
  and clients, closes what it opened, prints its "stopped" line and exits 0.
* **SIGHUP**: reload what the command can reload (a daemon's users file) and
  log it; a command with nothing to reload logs that and carries on. HUP never
  stops a command: a terminal closing, or an operator's reflex ``kill -HUP``,
  must not take a daemon and its clients down without a goodbye.

The handlers are installed first thing, before the command starts serving,
so a signal that comes during start-up is handled the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable

from rvasync._logging import stderr_logger

__all__ = ["handle_signals"]


def handle_signals(
    stop: asyncio.Event,
    *,
    command: str,
    reload: Callable[[], object] | None = None,
    nothing_to_reload: str = "",
) -> Callable[[], None]:
    """Install the handlers on the running loop; returns the call that removes them.

    INT and TERM set ``stop``. HUP calls ``reload()`` when given (it logs what it
    reloaded, and must not raise; an exception is logged and the command carries
    on), or logs ``nothing_to_reload`` (why there is nothing) at info level.
    Loops without signal support (Windows' proactor) install nothing; Ctrl-C
    still stops a command there through KeyboardInterrupt.
    """
    loop = asyncio.get_running_loop()

    def hangup() -> None:
        log = stderr_logger()
        if reload is None:
            log.info("SIGHUP: nothing to reload", command=command, reason=nothing_to_reload)
            return
        try:
            reload()
        except Exception:
            log.exception("SIGHUP: reloading failed; carrying on", command=command)

    installed: list[int] = []
    handlers: list[tuple[str, Callable[[], None]]] = [
        ("SIGINT", stop.set),
        ("SIGTERM", stop.set),
        ("SIGHUP", hangup),
    ]
    for name, handler in handlers:
        signum = getattr(signal, name, None)
        if signum is None:  # no SIGHUP on Windows
            continue
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, handler)
            installed.append(signum)

    def remove() -> None:
        for signum in installed:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signum)

    return remove
