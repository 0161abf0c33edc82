/* Peak RSS of a command: fork, exec argv[1..], wait4, print ru_maxrss in KiB. The parent is a small static
   binary, so the child's pre-exec copy of it does not inflate the number (python's would). Note that
   ru_maxrss is the peak over the child's life, across its execve: for `ncclenv -- /bin/true` it is
   max(ncclenv, /bin/true). Used by scripts/bench.sh. */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 2) return 2;
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) { execvp(argv[1], argv + 1); perror(argv[1]); _exit(127); }
    int status; struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) { perror("wait4"); return 1; }
    printf("%ld\n", ru.ru_maxrss);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
