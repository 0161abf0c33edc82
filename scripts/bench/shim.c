/* The floor for any entrypoint: a static binary that only execs its arguments. Used by scripts/bench.sh. */
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    execvp(argv[1], argv + 1);
    perror(argv[1]);
    return 127;
}
