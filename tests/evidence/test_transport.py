"""EutilsTransport on its own, over an in-memory HTTP stub (httpx.MockTransport) or a tiny local server:
URLs, redirects, the reasons its errors give, and a policy without attempts. The fake E-utilities
server in tests/evidence/test_entrez.py covers the retry schedule end to end."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from biocheck.evidence.article_xml import MissingDTDError, XMLParseError
from biocheck.evidence.ratelimit import RateLimiter
from biocheck.evidence.transport import EutilsTransport, ReplyError, RetryPolicy, credential_may_follow
from biocheck.evidence.types import BackendError, SearchError


def test_a_policy_without_attempts_sends_nothing_and_says_so():
    sent: list[httpx.Request] = []
    stub = httpx.Client(transport=httpx.MockTransport(lambda req: sent.append(req) or httpx.Response(200)))
    slept: list[float] = []
    transport = EutilsTransport("http://eutils.test/", {}, RateLimiter(10), timeout=1.0,
                                policy=RetryPolicy(max_attempts=0), http=stub, sleep=slept.append)
    with pytest.raises(SearchError) as err:
        transport.call("esearch.fcgi", {"term": "x"}, lambda body: body)
    transport.close()
    assert sent == [] and slept == []
    assert str(err.value).startswith(
        "PubMed esearch failed after 0 attempts (last error: no attempt made) at http://eutils.test/esearch.fcgi")


def _transport(handler, attempts: int = 1) -> EutilsTransport:
    stub = httpx.Client(transport=httpx.MockTransport(handler))
    return EutilsTransport("http://eutils.test", {"api_key": "k-123456"}, RateLimiter(10), timeout=1.0,
                           policy=RetryPolicy(max_attempts=attempts), http=stub, sleep=lambda s: None)


def test_a_connection_error_names_its_kind_and_message():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused by eutils.test (key k-123456)")

    transport = _transport(refuse)
    with pytest.raises(SearchError) as err:
        transport.call("efetch.fcgi", {}, lambda body: body)
    assert "(last error: connection error (ConnectError: connection refused by eutils.test (key ***)))" in str(err.value)


def test_a_refusal_quotes_the_start_of_the_body_only():
    page = "<html><p>" + "Bad-Request;" * 100 + "</p></html>"  # an error page, far longer than one line
    transport = _transport(lambda request: httpx.Response(400, text=page))
    with pytest.raises(SearchError) as err:
        transport.call("esearch.fcgi", {}, lambda body: body)
    assert f"HTTP 400 ({page[:200].strip()!r})" in str(err.value)


@pytest.mark.parametrize("base", ["http://eutils.test/entrez/eutils", "http://eutils.test/entrez/eutils/"])
def test_endpoints_are_resolved_under_the_base_url_with_or_without_its_slash(base):
    seen: list[str] = []
    stub = httpx.Client(transport=httpx.MockTransport(lambda req: seen.append(str(req.url)) or httpx.Response(200)))
    transport = EutilsTransport(base, {}, RateLimiter(10), timeout=1.0, policy=RetryPolicy(), http=stub)
    assert transport.call("esearch.fcgi", {"term": "x"}, lambda body: "parsed") == "parsed"
    assert seen == ["http://eutils.test/entrez/eutils/esearch.fcgi"]
    assert transport.base_url == "http://eutils.test/entrez/eutils/"


def _failing_parse(exc: Exception):
    def parse(body: bytes):
        raise exc
    return parse


@pytest.mark.parametrize(("exc", "says"), [
    (XMLParseError("reply cut short at line 3 (k-123456)"), "(last error: reply cut short at line 3 (***))"),
    (ReplyError("Search Backend failed k-123456", retryable=True), "(last error: server error 'Search Backend failed ***')"),
])
def test_an_unreadable_or_failed_reply_is_retried_and_its_reason_kept(exc, says):
    calls: list[int] = []
    transport = _transport(lambda request: calls.append(1) or httpx.Response(200, text="<x/>"), attempts=2)
    with pytest.raises(SearchError) as err:
        transport.call("esearch.fcgi", {}, _failing_parse(exc))
    assert len(calls) == 2 and says in str(err.value)


def test_a_reply_naming_an_unknown_dtd_fails_at_once_with_the_reason():
    calls: list[int] = []
    transport = _transport(lambda request: calls.append(1) or httpx.Response(200, text="<x/>"), attempts=3)
    with pytest.raises(SearchError) as err:
        transport.call("efetch.fcgi", {}, _failing_parse(MissingDTDError("foo_990101.dtd is not bundled")))
    assert len(calls) == 1
    assert str(err.value) == "PubMed efetch reply cannot be parsed: foo_990101.dtd is not bundled"


def test_a_redirect_is_followed_with_the_request_body():
    # NCBI moves endpoints (http -> https, new paths) with redirects; a POST must arrive intact.
    got: list[tuple[str, bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, body))
            if self.path.startswith("/old/"):
                self.send_response(308)
                self.send_header("Location", self.path.replace("/old/", "/new/"))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        transport = EutilsTransport(f"http://127.0.0.1:{server.server_port}/old", {}, RateLimiter(10), timeout=5.0,
                                    policy=RetryPolicy(max_attempts=1))
        assert transport.call("esearch.fcgi", {"term": "x"}, bytes.decode) == "ok"
        transport.close()
    finally:
        server.shutdown()
        server.server_close()
    assert got == [("/old/esearch.fcgi", b"term=x"), ("/new/esearch.fcgi", b"term=x")]


@pytest.mark.parametrize(("origin", "target", "allowed"), [
    ("https://eutils.ncbi.nlm.nih.gov/a", "https://eutils.ncbi.nlm.nih.gov/b", True),  # same host, https
    ("http://eutils.ncbi.nlm.nih.gov/a", "https://eutils.ncbi.nlm.nih.gov/b", True),  # upgraded to https
    ("https://eutils.ncbi.nlm.nih.gov/a", "http://eutils.ncbi.nlm.nih.gov/b", False),  # downgraded: in clear text
    ("https://eutils.ncbi.nlm.nih.gov/a", "https://evil.example/b", False),  # another host
    ("https://eutils.ncbi.nlm.nih.gov/a", "https://eutils.ncbi.nlm.nih.gov.evil.example/", False),
    ("http://127.0.0.1:8000/a", "http://127.0.0.1:9000/b", True),  # loopback keeps plain http
    ("http://127.0.0.1:8000/a", "http://127.0.0.2:8000/b", False),  # another loopback address: another host
])
def test_a_credential_follows_a_redirect_only_on_its_host_over_https(origin, target, allowed):
    assert credential_may_follow(httpx.URL(origin), httpx.URL(target)) is allowed


def test_a_redirect_off_the_host_is_refused_before_the_key_is_sent():
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.url.host == "eutils.test":
            return httpx.Response(307, headers={"Location": "https://catcher.test/esearch.fcgi"})
        return httpx.Response(200, content=b"<ok/>")

    stub = httpx.Client(transport=httpx.MockTransport(handler), follow_redirects=True)
    transport = EutilsTransport("http://eutils.test", {"api_key": "k-123456"}, RateLimiter(10), timeout=1.0,
                                policy=RetryPolicy(max_attempts=3), http=stub, sleep=lambda s: None)
    with pytest.raises(BackendError, match=r"^PubMed esearch: http://eutils.test/esearch.fcgi redirects to "
                                           r"https://catcher.test/esearch.fcgi; refused") as err:
        transport.call("esearch.fcgi", {"term": "x"}, lambda body: body)
    assert [r.url.host for r in sent] == ["eutils.test"]  # one request, to the key's own host, no retry
    assert "k-123456" not in str(err.value)


def test_without_a_key_a_redirect_to_another_host_is_followed():
    hosts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if request.url.host == "eutils.test":
            return httpx.Response(307, headers={"Location": "https://mirror.test/esearch.fcgi"})
        return httpx.Response(200, content=b"<ok/>")

    stub = httpx.Client(transport=httpx.MockTransport(handler), follow_redirects=True)
    transport = EutilsTransport("http://eutils.test", {}, RateLimiter(10), timeout=1.0,
                                policy=RetryPolicy(max_attempts=1), http=stub)
    assert transport.call("esearch.fcgi", {}, lambda body: body) == b"<ok/>"
    assert hosts == ["eutils.test", "mirror.test"]


def test_a_deadline_spent_on_waits_ends_the_request_before_the_next_attempt():
    slept: list[float] = []
    stub = httpx.Client(transport=httpx.MockTransport(lambda req: httpx.Response(503)))
    transport = EutilsTransport("http://eutils.test", {}, RateLimiter(10), timeout=1.0,
                                policy=RetryPolicy(max_attempts=5, backoff_base=8.0, deadline=3.0), http=stub,
                                sleep=slept.append)
    with pytest.raises(BackendError, match=r"no complete answer within 3 s \(search.deadline_s\)"):
        transport.call("esearch.fcgi", {}, lambda body: body)
    assert slept == []  # a 4-8 s backoff would pass the 3 s deadline: no wait, no second attempt


def test_a_gzip_bomb_is_inflated_no_further_than_the_cap(monkeypatch):
    import gzip
    import zlib

    from biocheck.evidence import transport as transport_module

    bomb = gzip.compress(b"\0" * (32 * 2**20), compresslevel=9)  # 32 MiB of zeros in ~32 KB
    inflated: list[int] = []
    real = zlib.decompressobj

    class Spy:  # counts what the decompressor hands out
        def __init__(self, wbits: int) -> None:
            self._d = real(wbits)

        def decompress(self, data: bytes, max_length: int = 0) -> bytes:
            out = self._d.decompress(data, max_length)
            inflated.append(len(out))
            return out

        @property
        def unconsumed_tail(self) -> bytes:
            return self._d.unconsumed_tail

    monkeypatch.setattr(transport_module.zlib, "decompressobj", Spy)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(bomb)))
            self.end_headers()
            self.wfile.write(bomb)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        transport = EutilsTransport(f"http://127.0.0.1:{server.server_port}/", {}, RateLimiter(10), timeout=5.0,
                                    policy=RetryPolicy(max_attempts=3))
        transport.max_reply_bytes = 2**20
        with pytest.raises(BackendError, match=r"^PubMed esearch sent a reply over 1 MiB \(decoded\); refused"):
            transport.call("esearch.fcgi", {}, lambda body: body)
        transport.close()
    finally:
        server.shutdown()
        server.server_close()
    assert 2**20 < sum(inflated) <= 2**20 + 1  # stopped one byte past the cap, not at 32 MiB
