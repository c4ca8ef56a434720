// {{name}}: a Tenure owned task.
//
// While this node owns the resource `{{name}}`, `start` runs: every INTERVAL_MS it counts
// one step, keeps the count in the resource's state (so the next owner goes on from it)
// and logs it with the lease's fencing token. It returns when a stop is requested;
// `cleanup` then runs on the same instance. Whatever `start` throws ends the start with
// its message. The build puts the SDK's tenure.js beside this file.

import { env, log, sleep, state, task } from "./tenure.js";

export const { start, cleanup } = task({
  async start(lease) {
    const interval = Number(env("INTERVAL_MS") ?? "1000");
    const saved = state.load();
    let count = saved ? new DataView(saved.buffer, saved.byteOffset).getBigUint64(0, true) : 0n;
    log("info", `started token=${lease.token} count=${count}`);
    for (;;) {
      // One step of work. Give lease.token to whatever you write to (`fetch` goes through
      // wasi:http and carries it as `tenure-token`), so it can refuse a stale owner.
      count += 1n;
      const bytes = new Uint8Array(8);
      new DataView(bytes.buffer).setBigUint64(0, count, true);
      state.save(bytes);
      log("info", `tick ${count} token=${lease.token}`);
      if ((await sleep(interval)) === "stop-requested") {
        return;
      }
    }
  },
  cleanup(reason) {
    // Release what `start` holds outside the plugin; keep it short (cleanup_timeout).
    log("info", `cleanup reason=${reason}`);
  },
});
