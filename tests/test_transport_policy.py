"""EutilsTransport on its own, over an in-memory HTTP stub (httpx.MockTransport) or a tiny local server:
URLs, redirects, the reasons its errors give, and a policy without attempts. The fake E-utilities
server in tests/test_entrez.py covers the retry schedule end to end."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from biocheck.pubmed.article_xml import MissingDTDError, XMLParseError
from biocheck.pubmed.ratelimit import RateLimiter
from biocheck.pubmed.transport import EutilsTransport, ReplyError, RetryPolicy
from biocheck.pubmed.types import SearchError


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
