"""Build of the `creek` package.

The gRPC stubs (`creek._pb.creek_pb2`, `creek_pb2_grpc`) are generated here,
at build time, from the repository's one `proto/creek.proto`; they are never
committed. pip builds a local directory in place (pip >= 21.3), so the proto
is found two levels up. An sdist carries a copy of it (see `SdistWithProto`),
so a wheel built from the sdist gets the same stubs.

Nothing is written into the source tree: setuptools' scratch directories
(`build/`, where the stubs are generated, and the `*.egg-info` metadata) go
to a temporary directory removed when the build ends (see `scratch_options`).
"""

import atexit
import shutil
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
# In the repository: the proto the server and every client share.
REPO_PROTO = HERE.parent.parent / "proto" / "creek.proto"
# In an sdist: the copy `SdistWithProto` put there.
SDIST_PROTO = HERE / "proto" / "creek.proto"
# Where the stubs go inside the package. The proto is staged at this path
# for protoc, so the generated modules import each other as `creek._pb.…`.
STUB_DIR = Path("creek") / "_pb"


def proto_source() -> Path:
    # An sdist's own copy first: outside the repository, two levels up may
    # hold anything.
    for path in (SDIST_PROTO, REPO_PROTO):
        if path.is_file():
            return path
    raise SystemExit(
        f"creek.proto not found (looked for {REPO_PROTO} and {SDIST_PROTO}); "
        "build the package from the Creek repository (pip >= 21.3 builds in place)"
    )


def generate_stubs(build_lib: Path) -> None:
    # Imported here: grpcio-tools is a build requirement, not a runtime one.
    import grpc_tools
    from grpc_tools import protoc

    source = proto_source()
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out = build_lib / STUB_DIR
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        staged = Path(tmp) / STUB_DIR / "creek.proto"
        staged.parent.mkdir(parents=True)
        shutil.copyfile(source, staged)
        rc = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{tmp}",
                f"-I{well_known}",
                f"--python_out={build_lib}",
                f"--pyi_out={build_lib}",
                f"--grpc_python_out={build_lib}",
                str(staged),
            ]
        )
    if rc != 0:
        raise SystemExit(f"protoc failed on {source} (exit {rc})")
    # Ship the proto the stubs came from, so a test can check they match.
    shutil.copyfile(source, out / "creek.proto")


class BuildPyWithStubs(build_py):
    """`build_py`, then the gRPC stubs into the build directory."""

    def run(self):
        super().run()
        if not self.dry_run:
            generate_stubs(Path(self.build_lib))


class SdistWithProto(sdist):
    """`sdist`, with a copy of the repository's proto in `proto/`."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        target = Path(base_dir) / "proto" / "creek.proto"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(proto_source(), target)


def scratch_options() -> dict:
    """Defaults that move setuptools' scratch files out of the source tree:
    `build_base` (build/lib, build/bdist.*, the generated stubs) and
    `egg_base` (creek.egg-info) into a temporary directory, removed at exit.
    Options given on the command line (e.g. `--egg-base`, which the PEP 517
    metadata hook passes) still win."""
    scratch = tempfile.mkdtemp(prefix="creek-build-")
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    egg_base = Path(scratch) / "egg-info"
    egg_base.mkdir()
    return {
        "build": {"build_base": str(Path(scratch) / "build")},
        "egg_info": {"egg_base": str(egg_base)},
    }


setup(
    cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProto},
    options=scratch_options(),
)
