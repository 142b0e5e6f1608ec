"""serve's forwarding session (`message_export.SettledSession`): the settings `requests` reads from the environment
(proxies, NO_PROXY, a CA bundle), the same as a plain session's, read once per URL instead of on every request."""
from __future__ import annotations

import pytest
import requests

from otel_agent_eval.serve.message_export import HttpMessageExporter, SettledSession

URLS = ["http://collector:4318/v1/traces", "http://127.0.0.1:4318/v1/traces", "https://hop.example.com/v1/traces"]


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("verify", [None, True, False, "/etc/hop-ca.pem"])
def test_the_settings_are_a_plain_sessions(monkeypatch: pytest.MonkeyPatch, url: str, verify: object) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    monkeypatch.setenv("HTTPS_PROXY", "http://secure-proxy:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/bundle.pem")
    plain, settled = requests.Session(), SettledSession()
    for _ in range(2):
        assert settled.merge_environment_settings(url, {}, None, verify, None) == \
            plain.merge_environment_settings(url, {}, None, verify, None)


def test_the_environment_is_read_once_per_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    session = SettledSession()
    first = session.merge_environment_settings(URLS[0], {}, None, None, None)
    first["proxies"]["http"] = "changed by a caller"  # a copy: what the session keeps is not changed
    monkeypatch.setenv("HTTP_PROXY", "http://another:3128")
    again = session.merge_environment_settings(URLS[0], {}, None, None, None)
    assert again["proxies"]["http"] == "http://proxy:3128"
    assert session.merge_environment_settings(URLS[2], {}, None, None, None)["proxies"]["http"] == "http://another:3128"


def test_the_exporter_forwards_with_it_unless_given_a_session() -> None:
    assert isinstance(HttpMessageExporter(endpoint=URLS[0])._client._transport._session, SettledSession)
    own = requests.Session()
    assert HttpMessageExporter(endpoint=URLS[0], session=own)._client._transport._session is own
