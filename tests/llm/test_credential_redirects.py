"""No credential follows a redirect to another host: the OpenAI-compatible chat client and judge
(Authorization: Bearer) against a server that answers 307 to a catcher on a second loopback
address (127.0.0.2), which records whatever reaches it. E-utilities' `api_key` is covered by
tests/evidence/test_entrez_faults.py (the same catcher, through `biocheck search`) and tests/evidence/test_transport.py.
"""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

import pytest

from biocheck.evidence.types import Article
from biocheck.llm.base import LLMError
from biocheck.llm.openai_backend import OpenAIChat
from biocheck.rewards.judge.base import JudgeError
from biocheck.rewards.judge.openai_judge import OpenAIJudge
from tests.helpers.fake_openai import FakeOpenAI, assistant

KEY = "sk-test-0123456789abcdefXYZ"


@pytest.fixture
def catcher():
    fake = FakeOpenAI(lambda body, headers: (200, assistant({"content": "caught"})))
    yield fake
    fake.close()


@pytest.fixture
def catcher_2(catcher):
    """The catcher, served on 127.0.0.2 (another host as far as any client can tell)."""
    handler = catcher.httpd.RequestHandlerClass
    httpd = ThreadingHTTPServer(("127.0.0.2", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield catcher, f"http://127.0.0.2:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def redirecting(catcher_2):
    catcher, target = catcher_2
    fake = FakeOpenAI(lambda body, headers: (307, None))
    # FakeOpenAI sends no Location of its own: answer with one that points at the catcher.
    handler = fake.httpd.RequestHandlerClass
    send_header = handler.send_header

    def with_location(self, key, value):
        send_header(self, key, value)
        if key == "Content-Length":
            send_header(self, "Location", target + "/chat/completions")

    handler.send_header = with_location
    yield fake, catcher, target
    fake.close()


def test_the_chat_client_refuses_a_redirect_and_the_key_stays_home(redirecting):
    fake, catcher, target = redirecting
    chat = OpenAIChat("m", base_url=fake.url, api_key=KEY, max_attempts=3)
    with pytest.raises(LLMError) as err:
        chat.chat([{"role": "user", "content": "hi"}], [])
    message = str(err.value)
    assert catcher.requests == []  # nothing reached the other host, the key least of all
    assert len(fake.requests) == 1 and fake.requests[0]["auth"] == f"Bearer {KEY}"  # not retried
    assert f"redirects (HTTP 307) to {target}/chat/completions; not followed" in message
    assert "\n" not in message and KEY not in message


def test_the_judge_refuses_a_redirect_in_one_line(redirecting):
    fake, catcher, target = redirecting
    judge = OpenAIJudge("m", base_url=fake.url, api_key=KEY, workers=1, max_attempts=2)
    with pytest.raises(JudgeError, match=r"^openai:m: .*redirects \(HTTP 307\) to http://127\.0\.0\.2:") as err:
        judge.score([("Aspirin prevents heart attacks.", Article(pmid="1", title="t", abstract="a"))])
    assert catcher.requests == [] and KEY not in str(err.value)


class _Recorder:
    """A loopback HTTP server that records each request's Authorization header and answers `answer(path)`."""

    def __init__(self, host: str, answer) -> None:
        from http.server import BaseHTTPRequestHandler

        self.auth: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a) -> None:
                pass

            def _any(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.auth.append(self.headers.get("Authorization"))
                status, headers = answer(self.path)
                self.send_response(status)
                for k, v in {"Content-Length": "0", **headers}.items():
                    self.send_header(k, v)
                self.end_headers()

            do_GET = do_POST = _any  # noqa: N815 - http.server's names

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_mlflow_drops_its_token_on_a_redirect_to_another_host(monkeypatch):
    # MLflow's own HTTP client (requests) is not ours to change; this pins that it already drops the
    # Authorization header when a tracking server redirects to another host, as the other clients do.
    import mlflow
    from mlflow.exceptions import MlflowException

    catcher = _Recorder("127.0.0.2", lambda path: (404, {}))
    server = _Recorder("127.0.0.1", lambda path: (307, {"Location": catcher.url + path}))
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", KEY)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    try:
        with pytest.raises(MlflowException):
            mlflow.MlflowClient(tracking_uri=server.url).get_experiment("0")
    finally:
        server.close()
        catcher.close()
    assert server.auth and server.auth[0] == f"Bearer {KEY}"  # the token went to its own host
    assert catcher.auth and set(catcher.auth) == {None}  # the redirect was followed, without it
