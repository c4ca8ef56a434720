"""{{name}}: a Tenure owned task.

While this node owns the resource ``{{name}}``, ``run`` runs: every ``INTERVAL_MS`` it
counts one step, keeps the count in the resource's state (so the next owner goes on from
it) and logs it with the lease's fencing token. It returns when a stop is requested;
``on_cleanup`` then runs on the same instance. Whatever ``run`` raises ends the start
with its message.
"""

import tenure
import wit_world


class WitWorld(tenure.Task, wit_world.WitWorld):
    def run(self, lease):
        interval = int(tenure.env("INTERVAL_MS", "1000")) / 1000
        saved = tenure.state.load()
        count = int.from_bytes(saved, "little") if saved else 0
        tenure.log("info", f"started token={lease.token} count={count}")
        while True:
            # One step of work. Give lease.token to whatever you write to (a request
            # through tenure.http carries it as `tenure-token`), so it can refuse a
            # stale owner.
            count += 1
            tenure.state.save(count.to_bytes(8, "little"))
            tenure.log("info", f"tick {count} token={lease.token}")
            if tenure.sleep(interval):
                return

    def on_cleanup(self, reason):
        # Release what `run` holds outside the plugin; keep it short (cleanup_timeout).
        tenure.log("info", f"cleanup reason={tenure.reason_name(reason)}")
