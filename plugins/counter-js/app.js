// `counter`, in JavaScript: an example of the resource's durable, fenced state.
//
// The same plugin as `plugins/counter` (Rust), in behaviour and in what it logs: it
// counts, saving the count after every step with `state.save`, and picks the count up
// again with `state.load` when it starts: after a restart, or on whichever node owns the
// resource next. The count is a u64 stored as 8 little-endian bytes, so the Rust, Python
// and JavaScript counters read each other's state.
//
// A save is accepted only while this instance's grant is current. When it fails (the
// slot was granted again, the node's lease expired...) the plugin stops with an error
// instead of going on as if the count were recorded.
//
// WIT to JavaScript, as componentize-js maps it: a u64 is a BigInt, `list<u8>` a
// Uint8Array, an enum a kebab-case string, and an imported function's `err` is thrown as
// an Error whose `payload` is the error variant (`{ tag, val }`). Throwing from `start`
// returns `err` with the message.

import { log, sleep } from "tenure:plugin/host@0.2.0";
import { load, save } from "tenure:plugin/state@0.2.0";

// How long to wait between two counts, in milliseconds.
const PERIOD_MS = 500n;

export function start(lease) {
  const token = lease.token;
  let n = loadCount();
  for (;;) {
    n += 1n;
    try {
      save(encode(n));
    } catch (e) {
      const message = `saving count=${n} failed: ${describe(e)}`;
      log("warn", message);
      throw message;
    }
    log("info", `count=${n} token=${token}`);
    if (sleep(PERIOD_MS) === "stop-requested") {
      return;
    }
  }
}

export function cleanup(reason) {
  // The count is saved after every step, so there is nothing left to flush.
  log("info", `cleanup reason=${reasonName(reason)}`);
}

// The saved count: 0 when nothing was ever saved.
function loadCount() {
  let saved;
  try {
    saved = load();
  } catch (e) {
    const message = `loading the count failed: ${describe(e)}`;
    log("warn", message);
    throw message;
  }
  if (saved === undefined) {
    return 0n;
  }
  if (saved.length !== 8) {
    throw `saved count has ${saved.length} bytes, not 8`;
  }
  return new DataView(saved.buffer, saved.byteOffset, 8).getBigUint64(0, true);
}

// The count as 8 little-endian bytes.
function encode(n) {
  const bytes = new Uint8Array(8);
  new DataView(bytes.buffer).setBigUint64(0, n, true);
  return bytes;
}

// A human description of a state error (thrown with the variant as its `payload`).
function describe(error) {
  const variant = error && error.payload;
  switch (variant && variant.tag) {
    case "stale-token":
      return "this instance's token is no longer current";
    case "lease-expired":
      return "the node's lease expired";
    case "too-large":
      return `the blob is larger than ${variant.val} bytes`;
    case "unavailable":
      return `the state store is unavailable: ${variant.val}`;
    default:
      return String(error);
  }
}

// The reason as the Rust counter logs it (its Debug form): `lease-lost` -> `LeaseLost`.
function reasonName(reason) {
  return reason
    .split("-")
    .map((word) => word.charAt(0).toUpperCase() + word.slice(1))
    .join("");
}
