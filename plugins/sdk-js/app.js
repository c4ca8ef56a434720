// `sdk-js`: a plugin written with the JavaScript SDK (sdk/js/tenure.js) the way its
// header shows: an async `start`, `fetch`, the SDK's `sleep` and `env`.
//
// Every INTERVAL_MS (default 100) it fetches TARGET_URL and logs
// `request seq={n} status={code}`; it returns when `sleep` says a stop was requested,
// logging `stop requested: returning`. With THROW set it throws `new Error(THROW)` at
// once instead, so the tests can see the message reach `plugin.stopped`. `cleanup` logs
// `cleanup reason={reason} fresh_instance={bool}`.

import { env, log, sleep, task } from "./tenure.js";

// Set at the top of `start`: false in `cleanup` means it runs on a fresh instance.
let started = false;

export const { start, cleanup } = task({
  async start(lease) {
    started = true;
    log("info", `start token=${lease.token}`);
    const fail = env("THROW");
    if (fail) {
      throw new Error(fail);
    }
    const url = env("TARGET_URL");
    const interval = Number(env("INTERVAL_MS") ?? "100");
    for (let seq = 1; ; seq++) {
      const response = await fetch(url);
      log("info", `request seq=${seq} status=${response.status}`);
      if ((await sleep(interval)) === "stop-requested") {
        log("info", "stop requested: returning");
        return;
      }
    }
  },
  cleanup(reason) {
    log("info", `cleanup reason=${reason} fresh_instance=${!started}`);
  },
});
