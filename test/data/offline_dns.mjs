// Preloaded (node --import) to make a process offline where it cannot get a network namespace of its own: every
// name lookup fails as it does with no network (ENOTFOUND), as Node's HTTP clients see it.
import dns from "node:dns";

dns.lookup = (hostname, options, callback) => {
  const done = typeof options === "function" ? options : callback;
  const error = Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), {
    code: "ENOTFOUND",
    hostname,
    syscall: "getaddrinfo",
  });
  process.nextTick(() => done(error));
};
