"""`counter`, in Python: an example of the resource's durable, fenced state.

The same plugin as `plugins/counter` (Rust), line for line in behaviour and in what it
logs: it counts, saving the count after every step with `state.save`, and picks the
count up again with `state.load` when it starts: after a restart, or on whichever node
owns the resource next. The count is a u64 stored as 8 little-endian bytes, so the
Rust, Python and JavaScript counters read each other's state.

A save is accepted only while this instance's grant is current. When it fails (the slot
was granted again, the node's lease expired...) the plugin stops with an error instead
of going on as if the count were recorded.
"""

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, state
from wit_world.imports.host import Level, Wake
from wit_world.imports.ownership import CleanupReason, Lease

# How long to wait between two counts, in milliseconds.
PERIOD_MS = 500


class WitWorld(wit_world.WitWorld):
    def start(self, lease: Lease) -> None:
        token = lease.token
        n = load_count()
        while True:
            n += 1
            try:
                state.save(n.to_bytes(8, "little"))
            except Err as e:
                message = f"saving count={n} failed: {describe(e.value)}"
                host.log(Level.WARN, message)
                raise Err(message)
            host.log(Level.INFO, f"count={n} token={token}")
            if host.sleep(PERIOD_MS) == Wake.STOP_REQUESTED:
                return

    def cleanup(self, reason: CleanupReason) -> None:
        # The count is saved after every step, so there is nothing left to flush.
        host.log(Level.INFO, f"cleanup reason={reason_name(reason)}")


def load_count() -> int:
    """The saved count: 0 when nothing was ever saved."""
    try:
        saved = state.load()
    except Err as e:
        message = f"loading the count failed: {describe(e.value)}"
        host.log(Level.WARN, message)
        raise Err(message)
    if saved is None:
        return 0
    if len(saved) != 8:
        raise Err(f"saved count has {len(saved)} bytes, not 8")
    return int.from_bytes(saved, "little")


def describe(error: state.Error) -> str:
    """A human description of a state error."""
    if isinstance(error, state.Error_StaleToken):
        return "this instance's token is no longer current"
    if isinstance(error, state.Error_LeaseExpired):
        return "the node's lease expired"
    if isinstance(error, state.Error_TooLarge):
        return f"the blob is larger than {error.value} bytes"
    if isinstance(error, state.Error_Unavailable):
        return f"the state store is unavailable: {error.value}"
    return repr(error)


def reason_name(reason: CleanupReason) -> str:
    """The reason as the Rust counter logs it (its Debug form): `LEASE_LOST` -> `LeaseLost`."""
    return "".join(word.capitalize() for word in reason.name.split("_"))
