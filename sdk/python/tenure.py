"""tenure: write a Tenure owned task in Python (componentize-py 0.25).

Put this file on componentize-py's path (``componentize -p path/to/tenure/sdk/python``) and
derive your world class from ``tenure.Task``::

    import urllib.request

    import tenure
    import wit_world

    tenure.install_urllib()  # urlopen goes through wasi:http: fenced


    class WitWorld(tenure.Task, wit_world.WitWorld):
        def run(self, lease):
            while True:
                with urllib.request.urlopen(tenure.env("TARGET_URL")) as response:
                    tenure.log("info", f"status {response.status}, token {lease.token}")
                if tenure.sleep(1.0):  # True: a stop was requested
                    return

        def on_cleanup(self, reason):
            tenure.log("info", f"cleanup {tenure.reason_name(reason)}")

What it gives:

- ``Task``: the world's exports. ``run(lease)`` is the work; whatever it raises (any
  exception) becomes ``start``'s ``err`` with its message and causes, which the node
  reports in ``plugin.stopped`` (an exception that is not ``Err`` would otherwise trap).
- ``sleep(seconds)``: the host's sleep, which ends early when a stop is requested;
  returns True then. ``stop_requested()`` says the same without waiting.
- ``lease()``, ``env(name)``: the grant, and the variables the manifest grants (``env``
  and ``secrets``; ``os.environ`` holds them too).
- ``state.load()`` / ``state.save(data)``: the resource's durable, fenced blob;
  failures raise ``StateError`` with a message.
- ``http``: a small requests-like client over wasi:http (``http.get(url)``,
  ``http.post(url, json=...)``, ``http.request(method, url, ...)``), and
  ``install_urllib()``, which makes ``urllib.request.urlopen`` use it. Requests through
  wasi:http carry the host's ``tenure-token`` headers; urllib's own handlers go over raw
  sockets, which are not fenced (and need a ``tcp://`` grant).

Async (asyncio) ``run`` is not supported yet: componentize-py's bundled event loop has
no timers.
"""

import email.message
import io
import json as _json
import os
import urllib.error
import urllib.parse
import urllib.request
import urllib.response

from componentize_py_types import Err, Ok
from wit_world.imports import host, outgoing_handler, streams
from wit_world.imports import state as _state
from wit_world.imports import types as _http

__all__ = [
    "Task",
    "sleep",
    "stop_requested",
    "lease",
    "env",
    "log",
    "reason_name",
    "message",
    "state",
    "StateError",
    "http",
    "HttpError",
    "Response",
    "install_urllib",
]


class Task:
    """The world's exports, for a class that also derives from ``wit_world.WitWorld``."""

    def run(self, lease):
        """The protected work; return when done or when a stop was requested."""
        raise NotImplementedError("derive from tenure.Task and define run(self, lease)")

    def on_cleanup(self, reason):
        """Releases what this instance held. The default does nothing."""

    def start(self, lease):
        try:
            self.run(lease)
        except Err:
            raise
        except BaseException as error:  # noqa: BLE001 - every failure keeps its message
            raise Err(message(error))

    def cleanup(self, reason):
        self.on_cleanup(reason)


def message(error):
    """An exception's message followed by its causes': ``outer: inner: root``."""
    parts = []
    seen = 0
    while error is not None and seen < 8:
        text = str(error) or type(error).__name__
        if type(error).__name__ not in ("Exception", "Err") and not text.startswith(
            type(error).__name__
        ):
            text = f"{type(error).__name__}: {text}"
        parts.append(text)
        error = error.__cause__ or error.__context__
        seen += 1
    return ": ".join(parts)


def sleep(seconds):
    """Sleeps, or less: returns True as soon as a stop is requested, else False."""
    ms = max(0, int(seconds * 1000))
    return host.sleep(ms) == host.Wake.STOP_REQUESTED


def stop_requested():
    return host.stop_requested()


def lease():
    return host.lease()


def env(name, default=None):
    return os.environ.get(name, default)


_LEVELS = {
    "trace": host.Level.TRACE,
    "debug": host.Level.DEBUG,
    "info": host.Level.INFO,
    "warn": host.Level.WARN,
    "warning": host.Level.WARN,
    "error": host.Level.ERROR,
}


def log(level, text):
    """A line in the node's log; ``level`` is "trace", "debug", "info", "warn" or "error"."""
    host.log(_LEVELS.get(str(level).lower(), host.Level.INFO), str(text))


def reason_name(reason):
    """A cleanup reason as the WIT spells it: "shutdown", "lease-lost", ..."""
    return reason.name.lower().replace("_", "-")


class StateError(Exception):
    """A state call failed; ``kind`` is the WIT case ("stale-token", "lease-expired", ...)."""

    def __init__(self, kind, text):
        super().__init__(text)
        self.kind = kind


def _state_error(error):
    value = error.value
    name = type(value).__name__.split("_", 1)[-1]
    if name == "StaleToken":
        return StateError("stale-token", "stale token: the slot was granted again")
    if name == "LeaseExpired":
        return StateError("lease-expired", "the node's lease expired")
    if name == "TooLarge":
        return StateError("too-large", f"state blob too large (limit {value.value} bytes)")
    if name == "Unavailable":
        return StateError("unavailable", f"state store unavailable: {value.value}")
    return StateError("unknown", str(value))


class _State:
    """The resource's state: one small durable blob, fenced by the grant's token."""

    def load(self):
        """The last saved blob (bytes), or None if nothing was ever saved."""
        try:
            return _state.load()
        except Err as error:
            raise _state_error(error) from None

    def save(self, data):
        """Replaces the blob; returns once it is durable. Refused once the grant is stale."""
        try:
            _state.save(bytes(data))
        except Err as error:
            raise _state_error(error) from None


state = _State()


class HttpError(Exception):
    """A request failed before an answer came (refused by the host, no connection, ...)."""


class Response:
    """An answer: ``status``, ``headers`` (a dict, lower-case names), ``content`` (bytes)."""

    def __init__(self, url, status, headers, content):
        self.url = url
        self.status = status
        self.status_code = status
        self.headers = headers
        self.content = content

    @property
    def ok(self):
        return 200 <= self.status < 400

    @property
    def text(self):
        return self.content.decode("utf-8", errors="replace")

    def json(self):
        return _json.loads(self.content)

    def raise_for_status(self):
        if self.status >= 400:
            raise HttpError(f"{self.status} from {self.url}")


_READ = 64 * 1024

# Headers wasi:http refuses from a guest (the host sets them): urllib adds `Host` and
# `Connection` to every request, so they are dropped here rather than failing it.
_FORBIDDEN_HEADERS = {
    "host",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "http2-settings",
}


def _drain(stream):
    chunks = []
    while True:
        try:
            chunks.append(stream.blocking_read(_READ))
        except Err as error:
            if type(error.value).__name__.endswith("Closed"):
                return b"".join(chunks)
            raise HttpError(f"reading the answer failed: {error.value}") from None


def _error_code(code):
    name = type(code).__name__.split("_", 1)[-1]
    detail = getattr(code, "value", None)
    return f"{name} ({detail})" if detail not in (None, "") else name


class _Http:
    """A small requests-like client over wasi:http."""

    def request(self, method, url, headers=None, data=None, json=None, timeout=None):
        if json is not None:
            data = _json.dumps(json).encode()
            headers = {"content-type": "application/json", **(headers or {})}
        if isinstance(data, str):
            data = data.encode()
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise HttpError(f"not an http or https URL: {url!r}")
        fields = _http.Fields.from_list(
            [
                (name.lower(), str(value).encode())
                for name, value in (headers or {}).items()
                if name.lower() not in _FORBIDDEN_HEADERS
            ]
        )
        request = _http.OutgoingRequest(fields)
        request.set_method(_method(method))
        request.set_scheme(_http.Scheme_Http() if parts.scheme == "http" else _http.Scheme_Https())
        request.set_authority(parts.netloc)
        request.set_path_with_query(
            (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        )
        options = None
        if timeout is not None:
            options = _http.RequestOptions()
            nanos = int(timeout * 1e9)
            options.set_connect_timeout(nanos)
            options.set_first_byte_timeout(nanos)
            options.set_between_bytes_timeout(nanos)
        body = request.body()
        try:
            future = outgoing_handler.handle(request, options)
        except Err as error:
            raise HttpError(f"{method} {url} failed: {_error_code(error.value)}") from None
        out = body.write()
        try:
            if data:
                for start in range(0, len(data), 4096):
                    out.blocking_write_and_flush(data[start : start + 4096])
        except Err as error:
            raise HttpError(f"{method} {url} failed sending its body: {error.value}") from None
        finally:
            out.__exit__(None, None, None)
        _http.OutgoingBody.finish(body, None)
        with future.subscribe() as ready:
            ready.block()
        answer = future.get()
        if isinstance(answer, Ok):
            answer = answer.value
        if isinstance(answer, Err):
            raise HttpError(f"{method} {url} failed: {_error_code(answer.value)}")
        if isinstance(answer, Ok):
            answer = answer.value
        status = answer.status()
        response_headers = {}
        for name, value in answer.headers().entries():
            response_headers[name.lower()] = value.decode("latin-1")
        incoming = answer.consume()
        stream = incoming.stream()
        try:
            content = _drain(stream)
        finally:
            stream.__exit__(None, None, None)
        _http.IncomingBody.finish(incoming)
        return Response(url, status, response_headers, content)

    def get(self, url, **kwargs):
        return self.request("GET", url, **kwargs)

    def post(self, url, **kwargs):
        return self.request("POST", url, **kwargs)

    def put(self, url, **kwargs):
        return self.request("PUT", url, **kwargs)

    def delete(self, url, **kwargs):
        return self.request("DELETE", url, **kwargs)


def _method(name):
    known = {
        "GET": _http.Method_Get,
        "HEAD": _http.Method_Head,
        "POST": _http.Method_Post,
        "PUT": _http.Method_Put,
        "DELETE": _http.Method_Delete,
        "CONNECT": _http.Method_Connect,
        "OPTIONS": _http.Method_Options,
        "TRACE": _http.Method_Trace,
        "PATCH": _http.Method_Patch,
    }
    kind = known.get(name.upper())
    return kind() if kind else _http.Method_Other(name)


http = _Http()


class WasiHttpHandler(urllib.request.BaseHandler):
    """urllib's http and https through wasi:http (so the host fences them)."""

    # Before urllib's own HTTPHandler (500), which would open a raw socket.
    handler_order = 100

    def _open(self, req):
        timeout = req.timeout if isinstance(req.timeout, (int, float)) else None
        try:
            response = http.request(
                req.get_method(),
                req.full_url,
                headers=dict(req.header_items()),
                data=req.data,
                timeout=timeout,
            )
        except HttpError as error:
            raise urllib.error.URLError(str(error)) from None
        headers = email.message.Message()
        for name, value in response.headers.items():
            headers[name] = value
        answer = urllib.response.addinfourl(
            io.BytesIO(response.content), headers, req.full_url, response.status
        )
        # What urllib's own responses carry and its error processor reads.
        answer.msg = answer.reason = f"HTTP {response.status}"
        if response.status >= 400:
            raise urllib.error.HTTPError(
                req.full_url, response.status, f"HTTP {response.status}", headers, answer
            )
        return answer

    def http_open(self, req):
        return self._open(req)

    def https_open(self, req):
        return self._open(req)


def install_urllib():
    """Makes ``urllib.request.urlopen`` send http and https through wasi:http."""
    urllib.request.install_opener(urllib.request.build_opener(WasiHttpHandler))
