#!/usr/bin/env bash
# The preload library must stand in for every file function that the
# installed fio and libsqlite3 import. This lists the file functions each
# imports (`nm -D --undefined-only`, against the catalogue below of C library
# functions that take a path or a file descriptor) and fails if one is neither
# defined by the library nor listed below as safe to leave to the C library,
# with the reason.
#
#   scripts/preload-symbols.sh [path/to/libsetcache_preload.so]
#
# Installs fio and libsqlite3 from the distribution's packages if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

lib=${1:-}
if [ -z "$lib" ]; then
    cargo build --quiet --release -p setcache-preload
    lib=target/release/libsetcache_preload.so
fi

install() {
    apt-get install -y "$@" >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y "$@" >/dev/null; }
}
command -v fio >/dev/null || install fio
sqlite=$(ls /usr/lib/*-linux-gnu/libsqlite3.so.0 2>/dev/null | head -1 || true)
if [ -z "$sqlite" ]; then
    install libsqlite3-0
    sqlite=$(ls /usr/lib/*-linux-gnu/libsqlite3.so.0 | head -1)
fi

# C library functions that take a path or a descriptor of a file.
catalogue="open open64 openat openat64 __open_2 __open64_2 __openat_2 __openat64_2
creat creat64 close close_range closefrom read __read_chk write pread pread64
__pread_chk __pread64_chk pwrite pwrite64 readv writev preadv preadv64 pwritev
pwritev64 preadv2 pwritev2 preadv64v2 pwritev64v2 lseek lseek64 fsync fdatasync
sync_file_range syncfs readahead ftruncate ftruncate64 truncate truncate64 fallocate fallocate64
posix_fallocate posix_fallocate64 posix_fadvise posix_fadvise64 fstat fstat64 stat
stat64 lstat lstat64 fstatat fstatat64 statx __fxstat __fxstat64 __xstat __xstat64
__lxstat __lxstat64 __fxstatat __fxstatat64 access faccessat euidaccess readlink
readlinkat __readlink_chk __readlinkat_chk fchmod fchown chmod chown lchown fchownat fchmodat utime utimes lutimes
futimes futimesat futimens utimensat glob glob64 nftw nftw64 ftw ftw64
unlink unlinkat rename renameat renameat2 link linkat symlink symlinkat mkdir
mkdirat rmdir dup dup2 dup3 fcntl fcntl64 ioctl flock lockf lockf64 mmap mmap64
mremap munmap msync madvise posix_madvise opendir fdopendir readdir readdir64
readdir_r readdir64_r closedir rewinddir seekdir telldir dirfd scandir scandir64
fopen fopen64 fdopen freopen freopen64 getxattr lgetxattr fgetxattr listxattr
llistxattr flistxattr setxattr lsetxattr fsetxattr splice vmsplice tee sendfile
sendfile64 copy_file_range statfs statfs64 fstatfs fstatfs64 statvfs statvfs64
realpath __realpath_chk canonicalize_file_name aio_read aio_read64 aio_write aio_write64 aio_fsync
aio_fsync64 aio_error aio_error64 aio_return aio_return64 aio_suspend aio_suspend64
aio_cancel aio_cancel64 remove mkstemp mkstemp64 mkostemp mkostemp64 mkstemps mkstemps64
mkostemps mkostemps64"

# Imported functions the library leaves to the C library, and why that is safe.
declare -A passes=(
    [statfs64]="asks about the file system of SETCACHE_DIR itself, which is real"
    [mremap]="moves mappings; the library never maps a file of the store"
    [munmap]="removes mappings; the library never maps a file of the store"
    [msync]="syncs mappings; the library never maps a file of the store"
    [madvise]="advises on mappings; the library never maps a file of the store"
    [posix_madvise]="advises on mappings; the library never maps a file of the store"
    [vmsplice]="moves bytes between a pipe and memory only; a store file is no pipe, and the kernel refuses its placeholder (EBADF) as it refuses a regular file"
    [aio_read64]="fio's posixaio engine only: glibc's AIO threads call the kernel, which refuses a placeholder (EBADF)"
    [aio_write64]="as aio_read64"
    [aio_fsync64]="as aio_read64"
    [aio_error64]="as aio_read64"
    [aio_return64]="as aio_read64"
    [aio_suspend64]="as aio_read64"
    [aio_cancel64]="as aio_read64"
)

defined=$(nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "W" {print $3}' | sort -u)
missing=0
for prog in "$(command -v fio)" "$sqlite"; do
    imported=$(nm -D --undefined-only "$prog" | awk '{print $2}' | sed 's/@.*//' | sort -u)
    served=()
    passed=()
    for f in $imported; do
        case " $(echo $catalogue) " in *" $f "*) ;; *) continue ;; esac
        if grep -qx "$f" <<<"$defined"; then
            served+=("$f")
        elif [ -n "${passes[$f]:-}" ]; then
            passed+=("$f")
        else
            echo "MISSING: $prog imports $f, which the preload library neither defines nor lists as safe to pass"
            missing=$((missing + 1))
        fi
    done
    echo "$prog: ${#served[@]} file functions served by the library: ${served[*]}"
    for f in "${passed[@]}"; do
        echo "    left to the C library: $f (${passes[$f]})"
    done
done
[ "$missing" = 0 ]
