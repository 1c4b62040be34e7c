/* A C++ callback of setcache_list that throws: the exception must not run on
 * through the library's frames (undefined behaviour); the process ends with
 * SIGABRT at the library's catch instead, and the catch below never runs.
 *
 *   throws DEVICE_DIR_0 DEVICE_DIR_1
 */
#include <setcache.h>

#include <cstdio>
#include <stdexcept>

static int thrower(const char *name, void *) {
    throw std::runtime_error(name);
}

int main(int argc, char **argv) {
    if (argc != 3)
        return 2;
    const char *devices[] = {argv[1], argv[2]};
    setcache_store *store = nullptr;
    setcache_file *file = nullptr;
    setcache_options small = {};
    small.cache_bytes = 8 << 20;
    if (setcache_store_open(devices, 2, &small, &store) != 0 ||
        setcache_create(store, "x", 10, &file) != 0) {
        std::printf("setup failed: %s\n", setcache_last_error());
        return 3;
    }
    std::printf("listing\n");
    std::fflush(stdout);
    try {
        setcache_list(store, thrower, nullptr);
    } catch (const std::exception &e) {
        std::printf("caught through the library: %s\n", e.what());
        return 4;
    }
    std::printf("returned\n");
    return 5;
}
