"""Settings read from the environment: the vector store's, empty values meaning unset, and
the admin key refused when it is a placeholder or easy to guess."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from server.config import Settings, weak_key


def test_lance_uri_is_a_folder_or_an_s3_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMORY_DATA_DIR", "/srv/memory")
    assert Settings().lance_uri is None and str(Settings().lance_path) == "/srv/memory/lance"
    monkeypatch.setenv("MEMORY_LANCE_URI", "/mnt/vectors")
    assert str(Settings().lance_path) == "/mnt/vectors" and not Settings().lance_remote
    monkeypatch.setenv("MEMORY_LANCE_URI", "s3://bucket/memory/")
    options = '{"aws_endpoint": "http://minio:9000", "allow_http": "true"}'
    monkeypatch.setenv("MEMORY_LANCE_STORAGE_OPTIONS", options)
    settings = Settings()
    assert settings.lance_uri == "s3://bucket/memory" and settings.lance_remote
    assert settings.lance_storage_options == {
        "aws_endpoint": "http://minio:9000",
        "allow_http": "true",
    }
    for bad in ("gs://bucket/x", "s3://", "http://host/x"):
        monkeypatch.setenv("MEMORY_LANCE_URI", bad)
        with pytest.raises(ValidationError, match="s3://bucket"):
            Settings()


def test_storage_options_that_are_not_a_json_object_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MEMORY_LANCE_STORAGE_OPTIONS", "aws_endpoint=http://minio:9000")
    with pytest.raises(Exception, match="lance_storage_options"):
        Settings()


def test_an_empty_model_url_or_key_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """MEMORY_LLM_BASE_URL= (as a compose file writes an unset variable) is no model at all,
    not a client aimed at an empty address."""
    monkeypatch.setenv("MEMORY_LLM_BASE_URL", "")
    monkeypatch.setenv("MEMORY_LLM_API_KEY", "")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings = Settings()
    assert settings.llm_base_url is None and settings.llm_api_key is None
    assert not settings.llm_enabled


PLACEHOLDER_KEYS = [
    "changeme-changeme-changeme",
    "your-admin-key-here",
    "YOUR_ADMIN_KEY_GOES_HERE",
    "<admin-key-of-the-server>",
    "replace-me-with-a-real-key",
    "example-admin-key-123",
    "placeholder-key-1",
    "sk-xxxx-xxxx-xxxx-xxxx",
    "admin-password-2024",
    "default-admin-key",
    "supersecretpassword",
]
REPEATED_KEYS = [
    "aaaaaaaaaaaaaaaa",
    "abababababababab",
    "1111222233334444",
    "passwordpassword",
    "zebra-zebra-zebra",
    "secret-secret-123",
]
RUN_KEYS = ["1234567890123456", "abcdefghijklmnop", "qwertyuiopasdfgh", "0987654321098765"]


@pytest.mark.parametrize("key", PLACEHOLDER_KEYS + REPEATED_KEYS + RUN_KEYS)
def test_an_admin_key_that_is_a_placeholder_or_easy_to_guess_is_refused(key: str) -> None:
    assert len(key) >= 16  # each passes the length check: refused for what it is
    with pytest.raises(ValidationError) as refused:
        Settings(admin_key=key)
    message = refused.value.errors()[0]["msg"]
    assert message.startswith("Value error, MEMORY_ADMIN_KEY ") and "openssl rand" in message
    assert key not in message and key.lower() not in message.lower()


def test_random_admin_keys_and_the_suites_own_are_accepted() -> None:
    import random
    import string

    from tests.conftest import ADMIN_KEY

    for key in (ADMIN_KEY, "my-admin-secret-0123456789", "correct-horse-battery-staple"):
        assert Settings(admin_key=key).admin_key == key
    draw = random.Random(23)
    hex_digits, urlsafe = "0123456789abcdef", string.ascii_letters + string.digits + "-_"
    for _ in range(5000):  # openssl rand -hex 8 and 24; secrets.token_urlsafe(12) and (24)
        for alphabet, length in ((hex_digits, 16), (hex_digits, 48), (urlsafe, 16), (urlsafe, 32)):
            key = "".join(draw.choices(alphabet, k=length))
            assert weak_key(key) is None, key  # what the setting's check asks


def test_serve_refuses_a_placeholder_admin_key_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from server.cli import main

    monkeypatch.setenv("MEMORY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("MEMORY_ADMIN_KEY", "changeme-changeme-changeme")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "MEMORY_ADMIN_KEY: Value error, MEMORY_ADMIN_KEY is a placeholder" in err, err
    assert "changeme-changeme-changeme" not in err
    assert not (tmp_path / "data").exists()  # refused before anything was opened
