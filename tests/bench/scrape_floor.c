/* The floor of an exporter scrape (tests/bench/bench.py, section `node`): one process that
 * opens and reads the files a scrape reads, and does nothing else.
 *
 *   scrape_floor LIST
 *
 * LIST holds `D <directory>` lines, each followed by the `F <name>` lines of the files read in
 * it. For every line on stdin the floor opens each directory once, opens each file relative
 * to it, reads it (one read(2) unless the buffer fills, as sysfs hands out an attribute
 * whole), closes both, and answers with the number of bytes read and a newline. The scrape
 * has to find these files too (directory listings, symlinks); the floor is given them. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct entry {
    int is_dir;
    char *name;
};

static struct entry *entries;
static size_t count;

static void load(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(2);
    }
    size_t cap = 0;
    char *line = NULL;
    size_t len = 0;
    ssize_t n;
    while ((n = getline(&line, &len, f)) > 0) {
        if (n < 3 || (line[0] != 'D' && line[0] != 'F') || line[1] != ' ') {
            fprintf(stderr, "scrape_floor: bad line in %s: %s", path, line);
            exit(2);
        }
        if (line[n - 1] == '\n')
            line[n - 1] = 0;
        if (count == cap) {
            cap = cap ? cap * 2 : 1024;
            entries = realloc(entries, cap * sizeof *entries);
            if (!entries)
                exit(2);
        }
        entries[count].is_dir = line[0] == 'D';
        entries[count].name = strdup(line + 2);
        count++;
    }
    free(line);
    fclose(f);
}

/* One pass over every file; the bytes read, or -1 when a file cannot be opened or read. */
static long long read_all(void) {
    static char buf[65536];
    long long total = 0;
    int dir = -1;
    for (size_t i = 0; i < count; i++) {
        if (entries[i].is_dir) {
            if (dir >= 0)
                close(dir);
            dir = open(entries[i].name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dir < 0) {
                perror(entries[i].name);
                return -1;
            }
            continue;
        }
        int fd = openat(dir, entries[i].name, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            perror(entries[i].name);
            return -1;
        }
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) == (ssize_t)sizeof buf)
            total += n;
        close(fd);
        if (n < 0)
            return -1;
        total += n;
    }
    if (dir >= 0)
        close(dir);
    return total;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: scrape_floor LIST\n");
        return 2;
    }
    load(argv[1]);
    char req[64];
    while (fgets(req, sizeof req, stdin)) {
        printf("%lld\n", read_all());
        fflush(stdout);
    }
    return 0;
}
