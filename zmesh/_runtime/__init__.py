"""The asyncio runtime (internal): dispatch, delivery, inboxes, handlers, the driver."""
