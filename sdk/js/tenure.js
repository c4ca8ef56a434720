// tenure.js: write a Tenure owned task in JavaScript the way JavaScript is written.
//
// One ES module, for componentize-js (0.23): put it next to your app and import it by a
// relative path (componentize-js resolves relative imports, not package names; with a
// bundler, `import ... from "tenure-sdk"` works too: package.json names this file).
//
//   import { task, sleep, env, log } from "./tenure.js";
//
//   export const { start, cleanup } = task({
//     async start(lease) {
//       for (;;) {
//         await fetch(env("TARGET_URL"));          // over wasi:http: carries tenure-token
//         if ((await sleep(1000)) === "stop-requested") return;
//       }
//     },
//     cleanup(reason) { log("info", `cleanup ${reason}`); },
//   });
//
// What it gives:
// - task({ start, cleanup }): the world's exports. `start` may be async (componentize-js
//   runs the event loop until its promise settles). Whatever it throws (an Error, a
//   string, anything) becomes `start`'s `err` with its message (and its causes'), which
//   the node reports in `plugin.stopped`; a thrown Error would otherwise trap and lose it.
// - sleep(ms): a timer that ends early when a stop is requested, and says which happened
//   ("elapsed" or "stop-requested"). Every timer of the instance (setTimeout included)
//   ends at a stop request; the host sees to that.
// - stopped(): a promise that settles once a stop is requested.
// - lease(), env(name), environment(): the grant, and the variables the manifest grants
//   (`env` and `secrets`). componentize-js has no `process.env`: use these.
// - state.load(), state.save(bytes): the resource's durable, fenced blob, with errors as
//   Error objects that say what went wrong.
// - log(level, message): a line in the node's log. `fetch` is the global one.

import {
  lease as hostLease,
  log as hostLog,
  stopRequested as hostStopRequested,
} from "tenure:plugin/host@0.2.0";
import { load, save } from "tenure:plugin/state@0.2.0";
import { getEnvironment } from "wasi:cli/environment@0.2.12";

// Longer timers are cut into pieces of this length (setTimeout's limit is 2^31 - 1 ms).
const MAX_TIMER_MS = 2 ** 31 - 1;

export function task({ start, cleanup }) {
  if (typeof start !== "function") {
    throw new TypeError("task({ start, cleanup }): start must be a function");
  }
  return {
    async start(lease) {
      try {
        await start(lease);
      } catch (error) {
        // componentize-js turns a thrown string into `err(string)`; anything else traps.
        throw message(error);
      }
    },
    cleanup(reason) {
      if (cleanup) {
        cleanup(reason);
      }
    },
  };
}

// An error's message followed by its causes': "outer: inner: root".
export function message(error) {
  const parts = [];
  for (let e = error, depth = 0; e !== undefined && e !== null && depth < 8; depth++) {
    if (e instanceof Error) {
      parts.push(e.name && e.name !== "Error" ? `${e.name}: ${e.message}` : e.message);
      e = e.cause;
    } else {
      parts.push(typeof e === "string" ? e : JSON.stringify(e) ?? String(e));
      break;
    }
  }
  return parts.join(": ") || "start failed";
}

export function stopRequested() {
  return hostStopRequested();
}

export async function sleep(ms) {
  let left = Math.max(0, Number(ms));
  while (!hostStopRequested()) {
    if (left <= 0) {
      return "elapsed";
    }
    const piece = Math.min(left, MAX_TIMER_MS);
    await new Promise((resolve) => setTimeout(resolve, piece));
    left -= piece;
  }
  return "stop-requested";
}

export async function stopped() {
  while (!hostStopRequested()) {
    await new Promise((resolve) => setTimeout(resolve, MAX_TIMER_MS));
  }
}

export function lease() {
  return hostLease();
}

export function environment() {
  return Object.fromEntries(getEnvironment());
}

export function env(name) {
  for (const [key, value] of getEnvironment()) {
    if (key === name) {
      return value;
    }
  }
  return undefined;
}

export function log(level, text) {
  hostLog(level, String(text));
}

const STATE_ERRORS = {
  "stale-token": () => "stale token: the slot was granted again",
  "lease-expired": () => "the node's lease expired",
  "too-large": (limit) => `state blob too large (limit ${limit} bytes)`,
  unavailable: (why) => `state store unavailable: ${why}`,
};

function stateError(error) {
  const variant = error && error.payload;
  const describe = variant && STATE_ERRORS[variant.tag];
  if (!describe) {
    return error;
  }
  const wrapped = new Error(describe(variant.val));
  wrapped.code = variant.tag;
  return wrapped;
}

export const state = {
  // The last saved blob (a Uint8Array), or undefined if nothing was ever saved.
  load() {
    try {
      return load();
    } catch (error) {
      throw stateError(error);
    }
  },
  // Replaces the blob; returns once it is durable. Throws once the grant is stale.
  save(bytes) {
    try {
      save(bytes);
    } catch (error) {
      throw stateError(error);
    }
  },
};
