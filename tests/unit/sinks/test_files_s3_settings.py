"""How ``eos.sinks.files.s3`` configures obstore from the ``AWS_*`` variables, and what its
errors may show. The requests themselves run against a real S3 server in
tests/integration/sinks/test_files_sink_s3.py."""

from __future__ import annotations

import pytest

from eos.sinks.files import s3 as files_s3

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture(autouse=True)
def aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)


def test_a_store_of_ones_own_is_addressed_path_style_and_may_be_plain_http(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8333/")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-3")
    config, client = files_s3._config()
    assert config["endpoint"] == "http://127.0.0.1:8333"
    assert config["virtual_hosted_style_request"] is False
    assert config["region"] == "eu-west-3" and config["secret_access_key"] == SECRET
    assert client["allow_http"] is True
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://s3.internal")
    assert files_s3._config()[1]["allow_http"] is False


def test_aws_is_addressed_virtual_hosted_style_over_https_with_a_session_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token-1")
    config, client = files_s3._config()
    assert "endpoint" not in config and config["virtual_hosted_style_request"] is True
    assert config["session_token"] == "token-1" and config["region"] == "us-east-1"
    assert "allow_http" not in client


def test_an_error_is_described_by_its_status_and_code_never_its_text() -> None:
    text = (f"Generic S3 error: Error performing PUT http://h:8333/b/404/k?X-Amz-Signature=abc "
            f"secret={SECRET} in 1ms - Server returned non-2xx status code: 403 Forbidden: "
            "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code></Error>")
    assert files_s3._described(RuntimeError(text)) == "HTTP 403 SignatureDoesNotMatch"
    assert files_s3._described(OSError("connection refused")) == "OSError"
