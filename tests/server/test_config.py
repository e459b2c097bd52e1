"""Settings read from the environment: the vector store's, and empty values meaning unset."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from server.config import Settings


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
