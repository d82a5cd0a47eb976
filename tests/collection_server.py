"""A stand-in for the SuiteSparse collection: an HTTP server on 127.0.0.1 serving an index
and archives the tests build from the bundled matrices (plus broken ones)."""

from __future__ import annotations

import functools
import gzip
import http.server
import io
import tarfile
import threading
import time

import sparsegpu as sg

# The server shuts itself down after this long even if a test forgets to.
LIFETIME_S = 120.0
# A "trickle" route sends one byte this often (a stalled server that never times out).
TRICKLE_INTERVAL_S = 0.02

INDEX_HEADER = "{count}\n2024-01-01 00:00:00\n"
# Group, Name, nrows, ncols, nnz, isReal, isBinary, isND, posdef, pattern_symmetry,
# numerical_symmetry, kind, pattern_entries
INDEX_ROWS = [
    "HB,bcsstk13,2003,2003,83883,1,0,1,1,1,1,computational fluid dynamics problem,83883",
    "Newman,karate,34,34,156,1,1,0,0,1,1,undirected graph,156",
    "LPnetlib,lp_afiro,27,51,102,1,0,0,0,0,0,linear programming problem,102",
    "HB,west0067,67,67,294,1,0,0,0,0.0,0.0,chemical process simulation problem,294",
    "Bad,truncated,34,34,156,1,1,0,0,1,1,undirected graph,156",
    "Bad,missing,10,10,10,1,0,0,0,1,1,undirected graph,10",
    "Bad,traversal,34,34,156,1,1,0,0,1,1,undirected graph,156",
    "Bad,symlink,34,34,156,1,1,0,0,1,1,undirected graph,156",
    "Bad,absolute,34,34,156,1,1,0,0,1,1,undirected graph,156",
    "Bad,corrupt,2003,2003,83883,1,0,1,1,1,1,structural problem,83883",
    "Bad,badmtx,3,3,1,1,0,0,0,1,1,structural problem,1",
    "Other,karate,34,34,156,1,1,0,0,1,1,undirected graph,156",
]


def index_text(rows=INDEX_ROWS) -> bytes:
    return (INDEX_HEADER.format(count=len(rows)) + "\n".join(rows) + "\n").encode()


def bundled_mtx(name: str) -> bytes:
    return gzip.decompress(sg.datasets.path(name).read_bytes())


def tar_bytes(members) -> bytes:
    """A .tar.gz of ``members``: (TarInfo, data or None) pairs."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def file_member(name: str, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def link_member(name: str, target: str, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, None


def matrix_archive(name: str, source: str | None = None, extra=()) -> bytes:
    return tar_bytes([file_member(f"{name}/{name}.mtx", bundled_mtx(source or name)), *extra])


def default_routes() -> dict[str, bytes | tuple]:
    """Fresh routes (a test may change them) over archives built once per session."""
    return dict(_built_routes())


@functools.cache
def _built_routes() -> dict[str, bytes | tuple]:
    afiro_rhs = b"%%MatrixMarket matrix array real general\n27 1\n" + b"1.0\n" * 27
    good = matrix_archive("karate")
    corrupt = bytearray(matrix_archive("corrupt", "bcsstk13"))
    corrupt[len(corrupt) // 2 : len(corrupt) // 2 + 64] = bytes(64)
    return {
        "/files/ssstats.csv": index_text(),
        "/MM/HB/bcsstk13.tar.gz": matrix_archive("bcsstk13"),
        "/MM/HB/west0067.tar.gz": matrix_archive("west0067"),
        "/MM/Newman/karate.tar.gz": good,
        "/MM/Other/karate.tar.gz": good,
        "/MM/LPnetlib/lp_afiro.tar.gz": matrix_archive(
            "lp_afiro", extra=[file_member("lp_afiro/lp_afiro_b.mtx", afiro_rhs)]
        ),
        "/MM/Bad/truncated.tar.gz": ("truncate", matrix_archive("truncated", "karate")),
        "/MM/Bad/traversal.tar.gz": tar_bytes(
            [
                file_member("traversal/traversal.mtx", bundled_mtx("karate")),
                file_member("traversal/../../../evil.mtx", b"owned"),
            ]
        ),
        "/MM/Bad/symlink.tar.gz": tar_bytes(
            [
                file_member("symlink/symlink.mtx", bundled_mtx("karate")),
                link_member("symlink/symlink_x.mtx", "/etc/passwd"),
            ]
        ),
        "/MM/Bad/absolute.tar.gz": tar_bytes([file_member("/tmp/absolute.mtx", b"owned")]),
        "/MM/Bad/corrupt.tar.gz": bytes(corrupt),
        "/MM/Bad/badmtx.tar.gz": tar_bytes(
            [file_member("badmtx/badmtx.mtx", b"%%MatrixMarket matrix array pattern general\n")]
        ),
        # a valid header and entries, then a NUL byte after the last value (scipy crashes)
        "/MM/Bad/nul.tar.gz": tar_bytes(
            [file_member("nul/nul.mtx", bundled_mtx("karate").rstrip(b"\n") + b"\0\n")]
        ),
        "/MM/Bad/trickle.tar.gz": ("trickle", good),
    }


class _Handler(http.server.BaseHTTPRequestHandler):
    timeout = 10  # a stuck client cannot hold a handler thread forever

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.server.requests.append(self.path)
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404, "Not Found")
            return
        mode, body = route if isinstance(route, tuple) else ("whole", route)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if mode == "trickle":
            self._trickle(body)
        else:
            self.wfile.write(body[: len(body) // 2] if mode == "truncate" else body)
        if mode != "whole":
            self.close_connection = True

    def _trickle(self, body: bytes) -> None:
        """One byte every TRICKLE_INTERVAL_S, until the client hangs up."""
        try:
            for k in range(len(body)):
                self.wfile.write(body[k : k + 1])
                self.wfile.flush()
                time.sleep(TRICKLE_INTERVAL_S)
        except OSError:
            pass

    def log_message(self, *args):
        pass


class CollectionServer:
    """The running server: ``url``, ``routes`` (path -> bytes), ``requests`` (paths seen)."""

    def __init__(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.routes = default_routes()
        self.httpd.requests = []
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._deadline = threading.Timer(LIFETIME_S, self.httpd.shutdown)
        self._deadline.daemon = True

    @property
    def routes(self) -> dict:
        return self.httpd.routes

    @property
    def requests(self) -> list[str]:
        return self.httpd.requests

    def __enter__(self):
        self._thread.start()
        self._deadline.start()
        return self

    def __exit__(self, *exc):
        self._deadline.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
