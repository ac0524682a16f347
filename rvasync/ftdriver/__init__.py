"""asyncio drivers of fault tolerance: ``FtMember`` and ``FtMonitor``.

The decisions live in the sans-IO core :mod:`rvasync.protocol.ft`; this
package connects it to a transport, the event loop's clock and the program's
callbacks. Modules: ``member`` and ``monitor`` (the public classes),
``_channel`` (records and advisories on a transport), ``_deadline`` (the
core's wake-up timer), ``_serial`` (ordered plain-or-async callbacks).
"""

from rvasync.ftdriver.member import FtMember
from rvasync.ftdriver.monitor import FtMonitor

__all__ = ["FtMember", "FtMonitor"]
