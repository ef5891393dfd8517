"""Wheel builds inside the SM70 builder container, through the docker SDK.

The one entry point is :func:`build_in_container`. It

1. connects to the engine (``DOCKER_HOST`` is honoured through
   ``docker.from_env()``; no engine -> BuildError with a tip);
2. builds or reuses the builder image (:func:`ensure_builder_image`), tagged by
   a hash of everything that goes into it, so a new fork tag with the same
   requirements reuses the image and a changed pin gets a new one;
3. creates a container (:class:`BuildContainer`), copies the fork source in
   with ``put_archive`` (never a bind mount of the user's tree), mounts the
   compiler cache (a named ccache volume, or sccache against an S3 bucket),
   runs ``ci/container-build.sh`` and streams its log live to stderr and to a
   log file;
4. fetches ``/out/*.whl`` with ``get_archive`` into a staging directory, then
   moves the wheels into ``out_dir`` and rewrites ``SHA256SUMS`` atomically,
   so a failed build leaves nothing half-written there;
5. removes the container, unless ``FORKPATCH_KEEP_CONTAINER=1``.

Nothing here shells out to the docker CLI.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from forkpatch import log, settings
from forkpatch.errors import BuildError
from forkpatch.escape import terminal
from forkpatch.wheels.dist import commit_dist
from forkpatch.wheels.options import (
    DEFAULT_BASE_IMAGE,
    BuildOptions,
    CacheConfig,
    default_dockerfile,
)
from forkpatch.wheels.runner import redact
from forkpatch.wheels.sourcetree import TreeEntry, source_reader, write_source_tar
from forkpatch.wheels.toolchain import require_toolchain, toolchain_needs

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

IMAGE_REPO = "forkpatch-builder"
LABEL_BUILDER_KEY = "org.forkpatch.builder.key"
LABEL_BUILD = "org.forkpatch.wheels"
KEEP_ENV = "FORKPATCH_KEEP_CONTAINER"
BUILD_SCRIPT = "/opt/forkpatch/container-build.sh"
SRC_DIR = "/src"
OUT_DIR = "/out"
LOG_TAIL_LINES = 30
#: Where local copies of the fork's CMake dependencies go (BuildOptions.sources).
DEPS_DIR = "/deps"

#: The fork's build inputs baked into the builder image (plus whatever they
#: include with -r / -c).
REQUIREMENT_FILES = (
    "requirements/build/cuda.txt",
    "requirements/cuda.txt",
    "requirements/common.txt",
)

#: Memory one compile job may take: nvcc on vLLM's CUTLASS/Marlin kernels
#: peaks at 3-5 GiB per process; more jobs than memory allows ends in the OOM killer.
MEM_PER_JOB = 4 * 1024**3


# ---------------------------------------------------------------------------
# configuration


def size_jobs(ncpu: int, mem_bytes: int) -> tuple[int, int]:
    """MAX_JOBS and NVCC_THREADS for a machine with ``ncpu`` cores and ``mem_bytes``.

    One nvcc thread per job (the fork's recipe; a single 7.0 arch gives nvcc
    nothing to parallelise), and no more jobs than cores or than memory
    allows at :data:`MEM_PER_JOB` each.
    """
    by_mem = mem_bytes // MEM_PER_JOB if mem_bytes > 0 else ncpu
    return max(1, min(ncpu, by_mem)), 1


# ---------------------------------------------------------------------------
# engine


def engine_address(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect(environ: Mapping[str, str] | None = None) -> docker.DockerClient:
    """A client for the engine at ``DOCKER_HOST`` (or the default socket), checked with a ping."""
    import docker  # the CLI must not import docker; only builds pay for it

    where = engine_address(environ)
    try:
        client = docker.from_env(environment=dict(environ) if environ is not None else None)
        client.ping()
    except docker.errors.DockerException as exc:
        raise BuildError(
            f"no Docker engine at {where}: {_short_reason(exc)}",
            tip="start the engine on this machine (`sudo systemctl start docker`; without "
            "systemd: `sudo dockerd &`), make sure your user may use it (`docker info`; the "
            "docker group), or point DOCKER_HOST at a running engine (ssh://host, tcp://...); "
            "an overlay build (`--mode overlay --base-wheel ...`) needs no Docker",
        ) from None
    return client


def _short_reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


# ---------------------------------------------------------------------------
# the builder image


def builder_image_key(
    dockerfile: bytes,
    context_files: Mapping[str, bytes],
    base_image: str,
    build_args: Mapping[str, str],
    base_image_id: str | None = None,
) -> str:
    """Content hash naming a builder image: same inputs, same tag."""
    h = hashlib.sha256()

    def put(tag: str, data: bytes) -> None:
        h.update(tag.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)

    put("dockerfile", dockerfile)
    for name in sorted(context_files):
        put("file:" + name, context_files[name])
    put("base", base_image.encode())
    put("base-id", (base_image_id or "").encode())
    for key in sorted(build_args):
        put("arg:" + key, str(build_args[key]).encode())
    return h.hexdigest()[:16]


def _context_tar(dockerfile: bytes, context_files: Mapping[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [("Dockerfile", dockerfile), *sorted(context_files.items())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") or name.startswith("tools/") else 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def ensure_builder_image(
    client: docker.DockerClient,
    *,
    dockerfile: Path,
    context_files: Mapping[str, bytes],
    base_image: str,
    build_args: Mapping[str, str],
    log_stream: IO[str] | None = None,
    volatile_args: Mapping[str, str] | None = None,
    network_mode: str | None = None,
) -> tuple[str, str]:
    """Build (or reuse) the builder image; return ``(tag, image_id)``.

    The tag is ``forkpatch-builder:<hash>`` over the Dockerfile bytes, the
    context files, the base image (name, and its id when present locally) and
    the build args. ``volatile_args`` reach the build but not the tag (the
    wheelhouse URL, whose port changes every time; what it serves is pinned by
    the lock in the context). The build log streams to stderr (and to ``log_stream``).
    """
    import docker

    try:
        dockerfile_bytes = dockerfile.read_bytes()
    except OSError as exc:
        raise BuildError(
            f"cannot read the builder Dockerfile {dockerfile}: {exc.strerror}",
            tip="reinstall forkpatch (it ships the Dockerfile as forkpatch/data/) or pass its path",
        ) from None
    args = {"BASE_IMAGE": base_image, **{k: str(v) for k, v in build_args.items()}}
    base_id: str | None
    try:
        base_id = client.images.get(base_image).id
    except docker.errors.ImageNotFound:
        base_id = None  # pulled at build time; pin it by digest for a stable key
    key = builder_image_key(dockerfile_bytes, context_files, base_image, args, base_id)
    tag = f"{IMAGE_REPO}:{key}"
    try:
        image = client.images.get(tag)
    except docker.errors.ImageNotFound:
        pass
    else:
        log.info(f"reusing builder image {tag} ({_short_id(image.id)})")
        _write(log_stream, f"reusing builder image {tag} ({image.id})\n")
        return tag, str(image.id)

    log.info(f"building builder image {tag} from {base_image}")
    _write(log_stream, f"building builder image {tag} from {base_image} args={args}\n")
    lines: list[str] = []
    error: str | None = None
    try:
        stream = client.api.build(
            fileobj=_context_tar(dockerfile_bytes, context_files),
            custom_context=True,
            tag=tag,
            buildargs={**args, **(volatile_args or {})},
            network_mode=network_mode,
            labels={LABEL_BUILDER_KEY: key},
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
        # The low-level API streams as the engine works; images.build() would
        # only hand the log over once the build is finished.
        for chunk in stream:
            text = chunk.get("stream") or chunk.get("status") or ""
            if text:
                for line in text.splitlines():
                    lines.append(line)
                    log.info(f"  | {line}")
                _write(log_stream, text if text.endswith("\n") else text + "\n")
            if "error" in chunk or "errorDetail" in chunk:
                error = chunk.get("error") or str(chunk.get("errorDetail"))
                _write(log_stream, f"ERROR: {error}\n")
                break
    except docker.errors.APIError as exc:
        error = _short_reason(exc)
    if error is not None:
        last = "\n".join(lines[-LOG_TAIL_LINES:])
        raise BuildError(
            f"building the builder image {tag} failed: {error.strip()}"
            + (f"\nlast lines of the image build:\n{_indent(last)}" if last else ""),
            tip=f"check that the base image {base_image} is present (`docker images`; "
            "for tests build the stand-in with ci/standin-image.sh) and that the "
            "Dockerfile's network installs can reach their indexes",
        )
    image = client.images.get(tag)
    return tag, str(image.id)


def builder_context(
    source: Path | Sequence[TreeEntry],
    *,
    dockerfile: Path,
    toolchain: str,
    tools: Mapping[str, Path] | None = None,
) -> dict[str, bytes]:
    """The build context besides the Dockerfile: build script, wheel lock, fork requirements,
    tools. The fork's requirement files are required by the ``apt`` toolchain only."""
    files: dict[str, bytes] = {}
    for name, target, needed in (
        ("container-build.sh", "ci/container-build.sh", True),
        ("cuda-wheels.lock", "cuda-wheels.lock", toolchain == "wheels"),
    ):
        path = dockerfile.parent / name
        try:
            files[target] = path.read_bytes()
        except OSError as exc:
            if not needed:
                files[target] = b""  # the Dockerfile COPYs it whatever the route
                continue
            raise BuildError(
                f"cannot read {path}: {exc.strerror}",
                tip="it ships next to the builder Dockerfile (ci/ in a checkout, "
                "forkpatch/data/ when installed)",
            ) from None
    read = source_reader(source)
    todo = list(REQUIREMENT_FILES)
    while todo:
        name = todo.pop(0)
        if name in files:
            continue
        data = read(name)
        if data is None:
            if toolchain == "apt" and name in REQUIREMENT_FILES:
                raise BuildError(
                    f"the fork tree has no {name}; the builder image installs the fork's "
                    "build requirements from it",
                    tip="is this a 1Cat-vLLM tree? The SM70 builder needs requirements/build/"
                    "cuda.txt, requirements/cuda.txt and requirements/common.txt",
                )
            continue
        files[name] = data
        todo.extend(_included_requirements(name, data))
    # COPY needs the directories to exist even when nothing else is in them.
    files["requirements/.forkpatch-keep"] = b""
    files["tools/.forkpatch-keep"] = b""
    for name, path in (tools or {}).items():
        files[f"tools/{name}"] = Path(path).read_bytes()
    return files


def _included_requirements(name: str, data: bytes) -> list[str]:
    """Files a requirements file pulls in with ``-r``/``-c`` (paths relative to it)."""
    out = []
    for raw in data.decode("utf-8", "replace").splitlines():
        m = re.match(r"^\s*(?:-r|-c|--requirement|--constraint)[\s=]+(\S+)", raw)
        if m:
            target = os.path.normpath(os.path.join(os.path.dirname(name), m.group(1)))
            if target.startswith("requirements/"):
                out.append(target)
    return out


# ---------------------------------------------------------------------------
# the container


class _LogStreamer:
    """Build log lines to a file (all of them) and to stderr (live).

    On a TTY a status line (elapsed time, line count) sits under the log; on
    anything else the lines are plain and a progress line is printed once a
    minute, so CI logs stay readable.
    """

    PROGRESS_EVERY_S = 60.0

    def __init__(self, log_file: IO[str], *, secrets: Iterable[str], echo: bool) -> None:
        self.log_file = log_file
        self.secrets = [s for s in secrets if s]
        self.echo = echo
        self.tty = sys.stderr.isatty()
        self.start = time.monotonic()
        self.last_progress = self.start
        self.count = 0
        self.tail: list[str] = []
        self._partial = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, chunk: bytes) -> None:
        text = self._partial + self._decoder.decode(chunk)
        *lines, self._partial = text.split("\n")
        for line in lines:
            self._line(line)

    def close(self) -> None:
        rest = self._partial + self._decoder.decode(b"", final=True)
        if rest:
            self._line(rest)
        self._partial = ""
        if self.echo and self.tty:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()

    def _line(self, line: str) -> None:
        line = redact(line.rstrip("\r"), self.secrets)
        self.count += 1
        self.tail.append(line)
        del self.tail[:-LOG_TAIL_LINES]
        self.log_file.write(line + "\n")
        self.log_file.flush()
        if not self.echo:
            return
        now = time.monotonic()
        line = terminal(line)
        if self.tty:
            sys.stderr.write(f"\r\033[K{line}\n\033[2m[build] {self.status(now)}\033[0m")
            sys.stderr.flush()
        else:
            sys.stderr.write(line + "\n")
            if now - self.last_progress >= self.PROGRESS_EVERY_S:
                self.last_progress = now
                sys.stderr.write(f"[build] {self.status(now)}\n")
            sys.stderr.flush()

    def status(self, now: float | None = None) -> str:
        elapsed = (time.monotonic() if now is None else now) - self.start
        return f"{_fmt_elapsed(elapsed)} elapsed, {self.count} log lines"


@dataclass
class BuildContainer:
    """A build container that is always removed again.

    ``with BuildContainer(client, image, ...) as box:`` creates it;
    :meth:`copy_in` puts the source tree at ``/src`` (``put_archive``),
    :meth:`run` starts the build script and streams its log,
    :meth:`fetch_wheels` gets ``/out/*.whl`` (``get_archive``). ``__exit__``
    removes the container (killing it if it still runs) unless ``keep`` or
    ``FORKPATCH_KEEP_CONTAINER=1``; then it says how to inspect it.
    """

    client: docker.DockerClient
    image: str
    log_path: Path
    environment: Mapping[str, str] = field(default_factory=dict)
    volumes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    secrets: Sequence[str] = ()
    network_mode: str | None = None
    keep: bool | None = None
    command: Sequence[str] = (BUILD_SCRIPT,)
    echo: bool = True
    container: Container | None = field(default=None, init=False)
    exit_code: int | None = field(default=None, init=False)
    log_tail: list[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.keep is None:
            self.keep = settings.flag(KEEP_ENV)

    def __enter__(self) -> BuildContainer:
        import docker

        name = f"forkpatch-build-{uuid.uuid4().hex[:10]}"
        try:
            self.container = self.client.containers.create(
                self.image,
                command=list(self.command),
                name=name,
                environment=dict(self.environment),
                volumes={k: dict(v) for k, v in self.volumes.items()},
                working_dir=SRC_DIR,
                labels={LABEL_BUILD: "1"},
                network_mode=self.network_mode,
                detach=True,
            )
        except docker.errors.APIError as exc:
            raise BuildError(
                f"cannot create the build container from {self.image}: "
                f"{redact(_short_reason(exc), self.secrets)}",
            ) from None
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import docker

        if self.container is None:
            return
        cid = self.container.id
        if self.keep:
            log.info(
                f"keeping build container {self.container.name} ({_short_id(cid)}) because "
                f"{KEEP_ENV}=1. Inspect it with:\n"
                f"    docker logs {self.container.name}\n"
                f"    docker cp {self.container.name}:{SRC_DIR} ./forkpatch-src-debug\n"
                f"    docker commit {self.container.name} forkpatch-debug && "
                "docker run --rm -it forkpatch-debug bash\n"
                f"and remove it with `docker rm -f {self.container.name}`"
            )
            return
        try:
            self.container.remove(force=True, v=False)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as err:
            log.warn(
                f"could not remove build container {self.container.name}: {_short_reason(err)}"
            )

    def need(self) -> Container:
        if self.container is None:
            raise RuntimeError("BuildContainer used outside its `with` block")
        return self.container

    def copy_in(self, source: Path | Iterable[TreeEntry], dest: str = SRC_DIR) -> int:
        """Copy a source directory (or tree entries) to ``dest`` in the container
        (``dest`` is created when the image lacks it)."""
        container = self.need()
        with tempfile.SpooledTemporaryFile(max_size=64 * 1024**2) as fh:
            at_src = dest == SRC_DIR
            count = write_source_tar(source, fh, prefix="" if at_src else dest)
            size = fh.tell()
            fh.seek(0)
            log.info(f"copying {count} files ({size / 1024**2:.1f} MiB) to {dest} in the container")
            if not container.put_archive(SRC_DIR if at_src else "/", fh):
                raise BuildError(f"copying the source into the build container ({dest}) failed")
        return count

    def run(self, log_file: IO[str]) -> int:
        """Start the build, stream its log (stderr + ``log_file``) until it exits; the exit code."""
        container = self.need()
        streamer = _LogStreamer(log_file, secrets=self.secrets, echo=self.echo)
        container.start()
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                streamer.feed(chunk)
        finally:
            streamer.close()
            self.log_tail = list(streamer.tail)
        result = container.wait()
        self.exit_code = int(result.get("StatusCode", -1))
        log.info(f"build finished with exit code {self.exit_code} ({streamer.status()})")
        return self.exit_code

    def fetch_wheels(self, dest_dir: Path, src: str = OUT_DIR) -> list[Path]:
        """Copy ``src/*.whl`` out of the container into ``dest_dir``."""
        return self.fetch_files(dest_dir, src, suffixes=(".whl",))

    def fetch_files(
        self, dest_dir: Path, src: str = OUT_DIR, suffixes: Sequence[str] | None = None
    ) -> list[Path]:
        """Copy the plain files directly under ``src`` (ending in one of ``suffixes``,
        if given) out of the container into ``dest_dir``."""
        container = self.need()
        wheels: list[Path] = []
        with tempfile.TemporaryFile() as fh:
            bits, _stat = container.get_archive(src)
            for chunk in bits:
                fh.write(chunk)
            fh.seek(0)
            with tarfile.open(fileobj=fh, mode="r:") as tar:
                for member in tar:
                    name = os.path.basename(member.name)
                    # Only plain files directly under /out, and only by basename:
                    # nothing in the archive can write outside dest_dir.
                    if (
                        not member.isreg()
                        or (suffixes is not None and not name.endswith(tuple(suffixes)))
                        or name != member.name.split("/")[-1]
                    ):
                        continue
                    if member.name.count("/") != 1:
                        continue
                    data = tar.extractfile(member)
                    assert data is not None
                    target = dest_dir / name
                    with open(target, "wb") as out:
                        shutil.copyfileobj(data, out)
                    wheels.append(target)
        return sorted(wheels)


# ---------------------------------------------------------------------------
# the entry point


@dataclass(frozen=True)
class ContainerWheels:
    """What a container build gave: its wheels, and the id of the builder image that
    built them (``sha256:...``, as the engine names it; the wheels' provenance)."""

    wheels: tuple[Path, ...]
    image_id: str


def build_in_container(
    source_dir: Path | Sequence[TreeEntry],
    opts: BuildOptions,
    *,
    version: str,
    log_path: Path,
    client: docker.DockerClient | None = None,
) -> ContainerWheels:
    """Build the fork's wheels in the SM70 builder container; return the wheels in
    ``opts.out_dir`` and the id of the builder image that built them.

    ``source_dir`` is the patched fork tree (a directory, or ``(path, mode,
    bytes)`` tree entries). ``version`` becomes ``VLLM_VERSION_OVERRIDE``.
    Everything else comes from ``opts`` (:class:`~forkpatch.wheels.options.BuildOptions`):
    the toolchain route, base image, arch list, cache, jobs, local sources for
    the fork's CMake, tools, network mode, extra environment.

    The full log (image build + container build) is written to ``log_path``.
    ``opts.out_dir`` receives the wheels and an updated ``SHA256SUMS`` only
    after the build succeeded.
    """
    if opts.out_dir is None:
        raise BuildError("build_in_container needs BuildOptions.out_dir")
    out_dir = opts.out_dir
    wheels, image_id = _run_in_builder(
        source_dir,
        opts,
        env={"VLLM_VERSION_OVERRIDE": version},
        log_path=log_path,
        title=f"build 1cat-vllm {version}",
        collect=lambda box: _publish(box, out_dir),
        client=client,
    )
    return ContainerWheels(wheels=tuple(wheels), image_id=image_id)


def compile_in_container(
    source_dir: Path | Sequence[TreeEntry],
    opts: BuildOptions,
    *,
    units: Sequence[str],
    log_path: Path,
    client: docker.DockerClient | None = None,
) -> list[Path]:
    """Configure the fork's CMake and compile only ``units`` (source paths such as
    ``csrc/sm70_turbomind/ops/awq_sm70_gemm.cu``) in the builder container.

    For proving a toolchain and timing translation units without a full
    ``_C`` build: ``ci/container-build.sh`` runs in its compile-only mode
    (``FORKPATCH_COMPILE_ONLY``), times each unit (wall, user and system CPU
    seconds, peak memory), runs ``cuobjdump`` on each object, and leaves
    objects, ``timings.tsv``, ``cuobjdump-*.txt`` and the CMake configure log in
    ``/out``. Those files are copied to ``opts.out_dir`` (replacing what was
    there) and returned. A failing configure or compile is a :class:`BuildError`.
    """
    if opts.out_dir is None:
        raise BuildError("compile_in_container needs BuildOptions.out_dir")
    if not units:
        raise BuildError("compile_in_container needs at least one translation unit")
    out_dir = opts.out_dir

    def collect(box: BuildContainer) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        for old in out_dir.iterdir():
            if old.is_file():
                old.unlink()
        return box.fetch_files(out_dir)

    files, _image = _run_in_builder(
        source_dir,
        opts,
        env={"VLLM_VERSION_OVERRIDE": "0+compile.only", "FORKPATCH_COMPILE_ONLY": " ".join(units)},
        log_path=log_path,
        title=f"compile {len(units)} translation unit(s)",
        collect=collect,
        client=client,
    )
    return files


def _run_in_builder(
    source_dir: Path | Sequence[TreeEntry],
    opts: BuildOptions,
    *,
    env: Mapping[str, str],
    log_path: Path,
    title: str,
    collect: Callable[[BuildContainer], list[Path]],
    client: docker.DockerClient | None,
) -> tuple[list[Path], str]:
    """Builder image, container, source (and local fork sources) in, build script,
    ``collect``: what it collected, and the builder image's id."""
    cache = opts.cache or CacheConfig.from_env()
    dockerfile = opts.dockerfile or default_dockerfile()
    base_image = opts.base_image or DEFAULT_BASE_IMAGE
    arch_list = opts.arch_list or "7.0"
    if not isinstance(source_dir, Path):
        source_dir = list(source_dir)  # read twice: requirements, then the archive
    elif not source_dir.is_dir():
        raise BuildError(f"the source tree {source_dir} is not a directory")
    for var, path in opts.sources.items():
        if not Path(path).is_dir():
            raise BuildError(
                f"{var}={path} is not a directory",
                tip="point it at a checkout of the exact revision the fork's CMake pins",
            )
    client = client or connect()

    cache_env, secrets = cache.container_env()
    max_jobs = opts.max_jobs
    if max_jobs is None:
        info = _engine_info(client)
        max_jobs, nvcc_threads = size_jobs(
            int(info.get("NCPU") or os.cpu_count() or 1), int(info.get("MemTotal") or 0)
        )
    else:
        nvcc_threads = 1
    full_env = {
        **env,
        "TORCH_CUDA_ARCH_LIST": arch_list,
        # flash-attention-v100 only has V100 kernels, whatever else the main wheel targets.
        "FLASH_ATTN_V100_CUDA_ARCH_LIST": "7.0",
        "MAX_JOBS": str(max_jobs),
        "NVCC_THREADS": str(nvcc_threads),
        **cache_env,
        **{var: f"{DEPS_DIR}/{_dep_name(var)}" for var in opts.sources},
        **opts.extra_env,
    }
    volumes: dict[str, dict[str, str]] = {}
    if cache.kind == "ccache":
        _ensure_volume(client, cache.volume)
        volumes[cache.volume] = {"bind": cache.ccache_dir, "mode": "rw"}
    build_args: dict[str, str] = {"TOOLCHAIN": opts.toolchain}
    if opts.python_version:
        build_args["PYTHON_VERSION"] = opts.python_version

    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", encoding="utf-8") as log_file, ExitStack() as stack:
        log_file.write(f"# forkpatch container {title}\n")
        shown_env = {k: redact(v, secrets) for k, v in sorted(full_env.items())}
        log_file.write(f"# environment: {shown_env}\n")
        with log.step(f"builder image (toolchain {opts.toolchain})"):
            context = builder_context(
                source_dir, dockerfile=dockerfile, toolchain=opts.toolchain, tools=opts.tools
            )
            volatile, image_network = _wheelhouse_args(opts, stack)
            tag, image_id = ensure_builder_image(
                client,
                dockerfile=dockerfile,
                context_files=context,
                base_image=base_image,
                build_args=build_args,
                log_stream=log_file,
                volatile_args=volatile,
                network_mode=image_network,
            )
        stack.close()  # the wheelhouse server is only needed by the image build
        log_file.write(f"# container build in {tag}\n")
        log_file.flush()
        with BuildContainer(
            client,
            tag,
            log_path=log_path,
            environment=full_env,
            volumes=volumes,
            secrets=secrets,
            network_mode=opts.network_mode,
            keep=opts.keep_container,
        ) as box:
            container = box.need()
            log_file.write(f"# container {container.name} ({container.id})\n")
            log_file.flush()
            if opts.toolchain == "none":
                require_toolchain(client, tag, toolchain_needs(source_dir, full_env), base_image)
            with log.step(f"copy the source into the container ({container.name})"):
                box.copy_in(source_dir)
                for var, path in opts.sources.items():
                    box.copy_in(Path(path), f"{DEPS_DIR}/{_dep_name(var)}")
            with log.step(f"{title} (arch {arch_list}, MAX_JOBS={max_jobs}, cache {cache.kind})"):
                code = box.run(log_file)
            if code != 0:
                log_file.write(f"# builder image {tag} {image_id}\n")
                raise BuildError(
                    f"the container {title} failed (exit code {code}); "
                    f"last {len(box.log_tail)} lines of the log:\n{_indent(chr(10).join(box.log_tail))}\n"
                    f"full log: {log_path}",
                    tip=(
                        f"fix the error above and build again; set {KEEP_ENV}=1 to keep the "
                        "container for inspection"
                        if not box.keep
                        else f"the container {container.name} was kept for inspection"
                    ),
                )
            with log.step("fetch the results"):
                results = collect(box)
        # Last line of the log, for a reader of the log: which image built these wheels.
        log_file.write(f"# builder image {tag} {image_id}\n")
    return results, image_id


def _dep_name(var: str) -> str:
    """``VLLM_CUTLASS_SRC_DIR`` -> ``vllm_cutlass``: the directory under /deps."""
    return var.removesuffix("_SRC_DIR").lower()


def _wheelhouse_args(opts: BuildOptions, stack: ExitStack) -> tuple[dict[str, str], str | None]:
    """Build args and network mode that hand the wheelhouse to the image build.

    A URL is passed as it is; a directory is served on the host's loopback for
    the duration of the image build, which then runs in the host's network
    namespace (``network_mode="host"``) to reach it. pip installs with
    ``--no-index``, so nothing else is fetched whatever the network allows.
    """
    if opts.toolchain != "wheels" or opts.wheelhouse is None:
        return {}, None
    where = str(opts.wheelhouse)
    if re.match(r"^[a-z][a-z0-9+.-]*://", where):
        return {"WHEELHOUSE_URL": where}, None
    if not engine_address().startswith("unix://"):
        raise BuildError(
            f"the wheelhouse directory {where} can only be served to a local Docker engine "
            f"(DOCKER_HOST={engine_address()})",
            tip="serve it over HTTP where the engine can reach it and pass the URL "
            "(--wheelhouse http://HOST:PORT/), or build on the engine's host",
        )
    from forkpatch.wheels.wheelhouse import serve, stable_port

    dockerfile = opts.dockerfile or default_dockerfile()
    lock = dockerfile.parent / "cuda-wheels.lock"
    port = stable_port(lock.read_bytes() if lock.is_file() else b"")
    url = stack.enter_context(serve(Path(where), port))
    log.info(f"serving the wheelhouse {where} to the image build at {url}")
    return {"WHEELHOUSE_URL": url}, "host"


def _publish(box: BuildContainer, out_dir: Path) -> list[Path]:
    """Wheels -> a staging directory -> ``out_dir``; then SHA256SUMS, atomically."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Staged inside out_dir (one file system for the renames; a killed build's stage
    # is swept by the next one).
    staging = Path(tempfile.mkdtemp(prefix=".forkpatch-stage-", dir=out_dir))
    try:
        staged = box.fetch_wheels(staging)
        if not staged:
            raise BuildError(
                f"the build exited 0 but left no wheel in {OUT_DIR}; see the log {box.log_path}"
            )
        # The wheels and SHA256SUMS enter out_dir as one unit, as the overlay path's
        # do: a build killed at any point leaves it all old or all new.
        commit_dist(out_dir, staged)
        wheels = [out_dir / wheel.name for wheel in staged]
        for target in wheels:
            log.info(f"  {target} ({target.stat().st_size / 1024**2:.2f} MiB)")
        return wheels
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _ensure_volume(client: docker.DockerClient, name: str) -> None:
    import docker

    try:
        client.volumes.get(name)
    except docker.errors.NotFound:
        client.volumes.create(name, labels={"org.forkpatch.cache": "ccache"})
        log.info(f"created compiler cache volume {name}")


def _engine_info(client: docker.DockerClient) -> dict[str, Any]:
    import docker

    try:
        return dict(client.info())
    except docker.errors.DockerException:
        return {}


def _write(stream: IO[str] | None, text: str) -> None:
    if stream is not None:
        stream.write(text)
        stream.flush()


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _short_id(image_id: str | None) -> str:
    return (image_id or "").split(":")[-1][:12]


def _fmt_elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


__all__ = [
    "BuildContainer",
    "CacheConfig",
    "ContainerWheels",
    "build_in_container",
    "builder_context",
    "builder_image_key",
    "compile_in_container",
    "connect",
    "ensure_builder_image",
    "size_jobs",
]
