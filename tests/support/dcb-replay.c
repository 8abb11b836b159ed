/* An LD_PRELOAD shim that answers iproute2's `dcb` in place of the kernel: the RTM_GETDCB
 * request dcb sends on its netlink socket is swallowed, and the reply datagram in the file
 * DCB_REPLAY (hex, whitespace ignored: a .hex file of tests/data/dcb) comes back with the request's
 * sequence number, then the ACK the kernel sends for NLM_F_ACK. So iproute2's own parser reads
 * the replies the doctor's tests decode, on a machine where no NIC answers DCB. With
 * DCB_REPLAY_REQUEST set, the request dcb sent is written there (hex), as strace would show it.
 *
 * build: cc -shared -fPIC -o dcb-replay.so tests/support/dcb-replay.c -ldl
 * run:   DCB_REPLAY=tests/data/dcb/mlx5-lossless.hex LD_PRELOAD=./dcb-replay.so dcb pfc show dev lo
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/netlink.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#define RTM_GETDCB 78

static unsigned char pending[65536];
static size_t pending_len;
static int pending_fd = -1;
static int ack_next;
static struct nlmsghdr request;

static size_t load_reply(unsigned char *out, size_t max)
{
	const char *path = getenv("DCB_REPLAY");
	FILE *f = path ? fopen(path, "r") : NULL;
	size_t n = 0;
	int c, hi = -1;

	if (!f) {
		fprintf(stderr, "dcb-replay: cannot open DCB_REPLAY=%s\n", path ? path : "(unset)");
		exit(90);
	}
	while ((c = fgetc(f)) != EOF && n < max) {
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (v < 0)
			continue;
		if (hi < 0) {
			hi = v;
		} else {
			out[n++] = (unsigned char)(hi << 4 | v);
			hi = -1;
		}
	}
	fclose(f);
	return n;
}

ssize_t sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr,
	       socklen_t alen)
{
	static ssize_t (*real)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	const struct nlmsghdr *nlh = buf;

	if (len >= sizeof(*nlh) && nlh->nlmsg_type == RTM_GETDCB) {
		const char *dump = getenv("DCB_REPLAY_REQUEST");
		FILE *f = dump ? fopen(dump, "w") : NULL;
		if (f) {
			for (size_t i = 0; i < len; i++)
				fprintf(f, "%02x", ((const unsigned char *)buf)[i]);
			fclose(f);
		}
		request = *nlh;
		pending_len = load_reply(pending, sizeof(pending));
		((struct nlmsghdr *)pending)->nlmsg_seq = nlh->nlmsg_seq;
		pending_fd = fd;
		ack_next = 0;
		return (ssize_t)len;
	}
	if (!real)
		real = dlsym(RTLD_NEXT, "sendto");
	return real(fd, buf, len, flags, addr, alen);
}

/* The ACK for NLM_F_ACK, as a socket with NETLINK_CAP_ACK gets it: the request's header. */
static size_t ack(unsigned char *out)
{
	struct nlmsghdr hdr = {
		.nlmsg_len = NLMSG_LENGTH(sizeof(struct nlmsgerr)),
		.nlmsg_type = NLMSG_ERROR,
		.nlmsg_flags = NLM_F_CAPPED,
		.nlmsg_seq = request.nlmsg_seq,
	};
	struct nlmsgerr err = { .error = 0, .msg = request };

	memcpy(out, &hdr, sizeof(hdr));
	memcpy(out + NLMSG_HDRLEN, &err, sizeof(err));
	return hdr.nlmsg_len;
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	static ssize_t (*real)(int, struct msghdr *, int);
	unsigned char ackbuf[64];
	const unsigned char *data;
	size_t len, room;

	if (fd != pending_fd || msg->msg_iovlen < 1) {
		if (!real)
			real = dlsym(RTLD_NEXT, "recvmsg");
		return real(fd, msg, flags);
	}
	if (ack_next) {
		len = ack(ackbuf);
		data = ackbuf;
	} else {
		len = pending_len;
		data = pending;
	}
	room = msg->msg_iov[0].iov_len < len ? msg->msg_iov[0].iov_len : len;
	memcpy(msg->msg_iov[0].iov_base, data, room);
	if (msg->msg_name && msg->msg_namelen >= sizeof(struct sockaddr_nl)) {
		struct sockaddr_nl *from = msg->msg_name;
		memset(from, 0, sizeof(*from));
		from->nl_family = AF_NETLINK;
		msg->msg_namelen = sizeof(*from);
	}
	msg->msg_flags = room < len ? MSG_TRUNC : 0;
	if (!(flags & MSG_PEEK)) {
		if (ack_next)
			pending_fd = -1;
		ack_next = 1;
	}
	return (flags & MSG_TRUNC) ? (ssize_t)len : (ssize_t)room;
}
