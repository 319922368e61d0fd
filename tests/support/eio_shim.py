"""A fault-injecting LD_PRELOAD library: real EIO from the broker's own system calls.

`build_eio_shim` compiles a small C file with gcc into the test's tmp dir. Loaded with
`eio_env`, it makes ``write``, ``writev``, ``pwrite``, ``fsync`` and ``fdatasync`` fail
with EIO for file descriptors whose path (``readlink /proc/self/fd/N``) is under the given
directory, as soon as the trigger file exists; every other call goes to libc unchanged.
That is what a dying disk looks like to the broker: the failure comes from the kernel
interface, not from a mock of our own code.

Without gcc the test is skipped, except under CI=true, where it fails (CI must run it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int failing(int fd) {
    const char *dir = getenv("TIERCEL_EIO_DIR");
    const char *trigger = getenv("TIERCEL_EIO_TRIGGER");
    if (dir == NULL || trigger == NULL || access(trigger, F_OK) != 0) return 0;
    char link[64], path[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) return 0;
    path[n] = 0;
    size_t len = strlen(dir);
    return strncmp(path, dir, len) == 0 && (path[len] == '/' || path[len] == 0);
}

#define REAL(name) \
    static __typeof__(name) *real_##name; \
    if (real_##name == NULL) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)
#define FAIL_IF_FAILING(fd) \
    if (failing(fd)) { errno = EIO; return -1; }

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write); FAIL_IF_FAILING(fd); return real_write(fd, buf, count);
}
ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    REAL(writev); FAIL_IF_FAILING(fd); return real_writev(fd, iov, iovcnt);
}
ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite); FAIL_IF_FAILING(fd); return real_pwrite(fd, buf, count, offset);
}
ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite64); FAIL_IF_FAILING(fd); return real_pwrite64(fd, buf, count, offset);
}
int fsync(int fd) {
    REAL(fsync); FAIL_IF_FAILING(fd); return real_fsync(fd);
}
int fdatasync(int fd) {
    REAL(fdatasync); FAIL_IF_FAILING(fd); return real_fdatasync(fd);
}
"""


def build_eio_shim(directory: Path) -> Path:
    """Compile the shim into ``directory``; skip (fail under CI=true) without gcc."""
    gcc = shutil.which("gcc")
    if gcc is None:
        if os.environ.get("CI") == "true":
            pytest.fail("gcc is needed to build the EIO shim, and CI must run this test")
        pytest.skip("gcc is needed to build the EIO shim")
    source = directory / "eio_shim.c"
    library = directory / "libeio_shim.so"
    source.write_text(_SOURCE)
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-O2", "-o", str(library), str(source), "-ldl"],
        check=True,
        timeout=60,
    )
    return library


def eio_env(library: Path, failing_dir: Path, trigger: Path) -> dict[str, str]:
    """The environment that loads the shim, failing I/O under ``failing_dir`` once
    ``trigger`` exists."""
    return {
        "LD_PRELOAD": str(library),
        "TIERCEL_EIO_DIR": os.path.realpath(failing_dir),
        "TIERCEL_EIO_TRIGGER": str(trigger),
    }
