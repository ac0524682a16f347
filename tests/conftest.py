"""The suite's logging: rvasync's records also go to the current stderr, as key=value lines.

Under pytest the root logger has pytest's capturing handlers, so rvasync's
fallback (which writes only when no other handler would) stands aside; the
tests that read what rvasync logged from ``capsys`` find it on stderr through
this handler, as a program that configured logging would.
"""

import logging

from rvasync._logging import stderr_handler

logging.getLogger("rvasync").addHandler(stderr_handler())
