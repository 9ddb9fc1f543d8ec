/* A sandboxed command's own PID namespace, capped by the kernel (swarm._sandbox._pidns).

   usage: pidns PID_MAX [--fd FD FILE] CMD [ARG...]

   (`--fd`: FILE opened read-only as descriptor FD for CMD: bubblewrap's seccomp filter,
   which a `/bin/sh` before bubblewrap opened otherwise, an exec more.)

   Makes a user namespace (the caller's uid and gid mapped to themselves) and a PID
   namespace it owns, then forks the namespace's init. The init sets the namespace's
   pid_max to PID_MAX (Linux 6.14 and later: no task of the namespace, nor of one nested
   in it, gets a pid there at or past it, so a fork past the cap fails with EAGAIN), forks
   CMD and waits for it. When CMD exits, the init tells this process CMD's status (128 +
   the signal that killed it), which this process exits with at once, and exits; the
   kernel then kills whatever is left in the namespace. Killed, the init tells nothing:
   this process exits 128 + 9 once the namespace is empty.

   Killing the init (SIGKILL, from outside: nothing inside can see it) kills the whole
   namespace in one kernel action: the kernel stops it making new pids, then kills every
   task in it. It does so only once the init's memory is torn down, and the init is this
   static program: it maps no file that CMD's processes map, so that teardown never waits
   on the locks a fork bomb keeps taking (bubblewrap's own pid 1 maps the C library every
   shell maps, and was seen to wait in its exit for 17 s while the bomb forked on).

   The namespace's pid_max is written from inside it, by a process whose only privilege is
   over the user namespace made here: on a kernel without per-namespace pid_max the write
   is refused (the host's own value needs privilege over the host's user namespace), never
   applied to the host.

   Run as root, it makes no user namespace: root's commands drop to a uid of their own
   inside bubblewrap (swarm._sandbox._identity), which a user namespace made here would
   have to map, and a mapped root would be the host's root to the old kernel's check. So
   as root it runs only on a kernel with per-namespace pid_max (6.14 and later), where the
   write is the namespace's; on an older one it exits 125 before making anything.

   Exits 125 with a message if a step fails before CMD starts; 127 if CMD is not found,
   126 if it cannot be run. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

static void fail(const char *step) {
    fprintf(stderr, "swarm sandbox: the command's pid namespace failed at %s: %s\n", step,
            strerror(errno));
    _exit(125);
}

static void put(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(path);
    ssize_t n = write(fd, text, strlen(text));
    if (n != (ssize_t)strlen(text)) fail(path);
    close(fd);
}

/* The exit status a shell gives for `status`. */
static int code(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 125;
}

/* Wait for child `pid` (reaping any other child on the way); its exit status. */
static int await(pid_t pid) {
    for (;;) {
        int status;
        pid_t done = wait(&status);
        if (done == pid) return code(status);
        if (done < 0 && errno != EINTR) return 125;
    }
}

/* Does this kernel keep pid_max per PID namespace (Linux 6.14 and later)? */
static int per_namespace_pid_max(void) {
    struct utsname names;
    unsigned major = 0, minor = 0;
    if (uname(&names) != 0 || sscanf(names.release, "%u.%u", &major, &minor) != 2) return 0;
    return major > 6 || (major == 6 && minor >= 14);
}

static void quiet(void) {
    /* the command's output ends when the command's processes are gone, not with ours */
    for (int fd = 0; fd < 3; fd++) close(fd);
}

int main(int argc, char **argv) {
    int first = 2; /* CMD's place in argv */
    if (argc > 2 && strcmp(argv[2], "--fd") == 0) {
        first = 5;
        if (argc > first) {
            int fd = atoi(argv[3]);
            if (fd < 3) {
                errno = EBADF;
                fail("--fd");
            }
            int opened = open(argv[4], O_RDONLY | O_CLOEXEC);
            if (opened < 0) fail(argv[4]);
            if (opened != fd && (dup2(opened, fd) < 0 || close(opened) != 0)) fail("dup2");
            if (opened == fd && fcntl(fd, F_SETFD, 0) != 0) fail("fcntl");
        }
    }
    if (argc <= first) {
        fprintf(stderr, "usage: %s PID_MAX [--fd FD FILE] CMD [ARG...]\n", argv[0]);
        return 125;
    }
    const char *pid_max = argv[1];
    char map[64];
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (uid == 0) { /* see above: a PID namespace alone, on a kernel that keeps it apart */
        if (!per_namespace_pid_max()) {
            errno = ENOSYS;
            fail("root's check for a kernel with per-namespace pid_max (6.14)");
        }
        if (unshare(CLONE_NEWPID) != 0) fail("unshare");
    } else {
        if (unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0) fail("unshare");
        put("/proc/self/setgroups", "deny");
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
        put("/proc/self/uid_map", map);
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
        put("/proc/self/gid_map", map);
    }

    int alive[2]; /* the init's way to tell that this process has gone */
    int told[2];  /* the init's way to tell CMD's exit status */
    if (pipe2(alive, O_CLOEXEC) != 0 || pipe2(told, O_CLOEXEC) != 0) fail("pipe");
    pid_t init = fork();
    if (init < 0) fail("fork");
    if (init > 0) {
        close(alive[0]);
        close(told[1]);
        quiet();
        unsigned char status;
        ssize_t n;
        while ((n = read(told[0], &status, 1)) < 0 && errno == EINTR) {
        }
        /* CMD's status as soon as it is known: the kernel empties the namespace after
           that, as it did bubblewrap's, without this waiting for it */
        if (n == 1) return status;
        return await(init); /* the init was killed */
    }

    /* the init: pid 1 of the new namespace, with every capability in its user namespace
       (or root's own) */
    close(alive[1]);
    close(told[0]);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail("PR_SET_PDEATHSIG");
    struct pollfd waiter = {alive[0], POLLIN, 0};
    if (poll(&waiter, 1, 0) > 0) _exit(125); /* the waiter died before the line above */
    close(alive[0]);
    put("/proc/sys/kernel/pid_max", pid_max); /* this namespace's: see above */
    pid_t command = fork();
    if (command < 0) fail("fork");
    if (command == 0) {
        execvp(argv[first], argv + first); /* uid 0 aside, the capabilities end at the exec */
        fprintf(stderr, "swarm sandbox: %s: %s\n", argv[first], strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    quiet();
    unsigned char status = (unsigned char)await(command);
    if (write(told[1], &status, 1) != 1) {
        /* the waiter has gone: nobody to tell */
    }
    return status;
}
