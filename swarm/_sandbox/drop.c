/* The first step of a sandboxed command when swarm runs as root (swarm._sandbox._drop):
   what `setpriv --reuid=U --regid=G --clear-groups --inh-caps=-all --ambient-caps=-all
   --bounding-set=-all --no-new-privs -- CMD...` does, in one small static program (setpriv
   is dynamically linked and parses its options: ~2 ms more per command).

   usage: drop UID GID CMD [ARG...]    exits 126 with a message if any step fails. */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static void fail(const char *step) {
    fprintf(stderr, "swarm sandbox: dropping privileges failed at %s: %s\n", step,
            strerror(errno));
    _exit(126);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s UID GID CMD [ARG...]\n", argv[0]);
        return 126;
    }
    uid_t uid = (uid_t)strtoul(argv[1], NULL, 10);
    gid_t gid = (gid_t)strtoul(argv[2], NULL, 10);
    if (setgroups(0, NULL) != 0) fail("setgroups");
    if (setresgid(gid, gid, gid) != 0) fail("setresgid");
    /* the bounding set, while CAP_SETPCAP is still held: EINVAL past the kernel's last */
    for (int cap = 0; cap < 64; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) fail("bounding set");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) fail("ambient caps");
    /* all three ids non-zero: the kernel empties the permitted and effective sets */
    if (setresuid(uid, uid, uid) != 0) fail("setresuid");
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct none[2];
    memset(none, 0, sizeof none);
    if (syscall(SYS_capset, &header, none) != 0) fail("capset");  /* inheritable too */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail("no_new_privs");
    execvp(argv[3], argv + 3);
    fprintf(stderr, "swarm sandbox: %s: %s\n", argv[3], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
