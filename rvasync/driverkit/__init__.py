"""The shared kit the asyncio drivers are built on: durable files, the core pump, group channels and deadline timers."""
