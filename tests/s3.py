"""An S3-compatible server on 127.0.0.1 for the vector-store tests: moto's server mode, from
the dev dependencies, started by the first test that asks and stopped at the end."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from embeddings.location import LanceLocation

REGION = "us-east-1"
KEY_ID, SECRET = "testing-key", "testing-secret"


class S3Server:
    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        self.endpoint = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(self.endpoint, timeout=1)
                break
            except httpx.HTTPError:
                assert self.process.poll() is None, "moto's server exited at start"
                assert time.monotonic() < deadline, "moto's server did not start"
                time.sleep(0.1)
        self._client: Any = None

    @property
    def options(self) -> dict[str, str]:
        """MEMORY_LANCE_STORAGE_OPTIONS for this server."""
        return {
            "aws_endpoint": self.endpoint,
            "aws_region": REGION,
            "aws_access_key_id": KEY_ID,
            "aws_secret_access_key": SECRET,
            "allow_http": "true",
        }

    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                region_name=REGION,
                aws_access_key_id=KEY_ID,
                aws_secret_access_key=SECRET,
            )
        return self._client

    def new_uri(self) -> str:
        """s3://<a new bucket>/vectors"""
        bucket = f"test-{uuid.uuid4().hex[:16]}"
        self.client.create_bucket(Bucket=bucket)
        return f"s3://{bucket}/vectors"

    def location(self, uri: str) -> LanceLocation:
        return LanceLocation(uri, self.options)

    def env(self, uri: str) -> dict[str, str]:
        return {"MEMORY_LANCE_URI": uri, "MEMORY_LANCE_STORAGE_OPTIONS": json.dumps(self.options)}

    def holding(self, uri: str, needle: bytes) -> list[str]:
        """Every object of the bucket whose bytes hold `needle` (whatever the prefix)."""
        bucket = uri.removeprefix("s3://").split("/", 1)[0]
        found = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                body = self.client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                if needle in body:
                    found.append(item["Key"])
        return found

    def download(self, uri: str, dest: Path) -> Path:
        """Every object of the bucket into `dest`, by key, for the file checks of a folder."""
        bucket = uri.removeprefix("s3://").split("/", 1)[0]
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                target = dest / item["Key"]
                target.parent.mkdir(parents=True, exist_ok=True)
                self.client.download_file(bucket, item["Key"], str(target))
        return dest

    def count(self, uri: str) -> int:
        bucket = uri.removeprefix("s3://").split("/", 1)[0]
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return sum(len(page.get("Contents", [])) for page in pages)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
