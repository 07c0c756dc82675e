/*
 * psmem_cb.c — a pseudo memory device in the LibTLP style: nettlp_run_cb over the 16
 * host-side contexts answers MRd with CplDs it builds with the tlp.h helpers and applies
 * MWr. A second thread runs the cpl/cpld/other callbacks on a LibTLP-side context.
 * Usage: psmem_cb BAR4_HEX SIZE ADAPTER_IP LOCAL_IP. Prints "psmem_cb: ready", runs
 * until a write of "STOP" at BAR4 + SIZE - 16, prints its counters and exits 0 when all
 * checks passed; the first failed check prints its line and exits with status 1.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <libtlp.h>

static unsigned char *mem;
static uintptr_t bar4;
static size_t memsize;
static int reads, writes, aborts, cplds, cpls, others, failures;

/* Stops at the first failure. */
static void fail(int line)
{
	fprintf(stderr, "psmem_cb: FAIL line %d (errno %d)\n", line, errno);
	exit(1);
}
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void send_cpl(struct nettlp *nt, struct tlp_mr_hdr *mh, uintptr_t addr,
		     int len, uint16_t status)
{
	unsigned char buf[6 + 12 + 4096 + 8];
	struct nettlp_hdr *nh = (struct nettlp_hdr *)buf;
	struct tlp_cpl_hdr *ch = (struct tlp_cpl_hdr *)(buf + 6);
	int with_data = status == TLP_CPL_STATUS_SC;
	int dws = with_data ? (int)(((addr & 3) + len + 3) / 4) : 0;
	size_t n = 6 + 12 + (size_t)dws * 4;

	memset(buf, 0, n);
	nh->seq = 0;
	nh->tstamp = 0;
	tlp_set_fmt(ch->tlp.fmt_type, TLP_FMT_3DW, with_data ? TLP_FMT_W_DATA : TLP_FMT_WO_DATA);
	tlp_set_type(ch->tlp.fmt_type, TLP_TYPE_Cpl);
	tlp_set_tclass(ch->tlp.tclass, tlp_tclass(mh->tlp.tclass));
	tlp_set_length(ch->tlp.falen, dws);
	ch->completer = htons(0x1b00);
	tlp_set_cpl_status(ch->stcnt, status);
	tlp_set_cpl_bcnt(ch->stcnt, len == 4096 ? 0 : len);
	ch->requester = mh->requester;
	ch->tag = mh->tag;
	ch->lowaddr = addr & 0x7f;
	if (with_data)
		memcpy(buf + 18 + (addr & 3), mem + (addr - bar4), len);
	if (write(nt->sockfd, buf, n) != (ssize_t)n)
		fail(__LINE__);
}

static int on_mrd(struct nettlp *nt, struct tlp_mr_hdr *mh, void *arg)
{
	uintptr_t addr = tlp_mr_addr(mh);
	int len = tlp_mr_data_length(mh);

	(void)arg;
	if (!tlp_is_mrd(mh->tlp.fmt_type) || tlp_id_to_bus(mh->requester) != 0)
		fail(__LINE__);
	pthread_mutex_lock(&lock);
	if (addr < bar4 || addr + len > bar4 + memsize || len > 256) {
		aborts++;
		pthread_mutex_unlock(&lock);
		send_cpl(nt, mh, addr, len ? len : 1, TLP_CPL_STATUS_CA);
		return 0;
	}
	reads++;
	pthread_mutex_unlock(&lock);
	send_cpl(nt, mh, addr, len, TLP_CPL_STATUS_SC);
	return 0;
}

static int on_mwr(struct nettlp *nt, struct tlp_mr_hdr *mh, void *m, size_t count, void *arg)
{
	uintptr_t addr = tlp_mr_addr(mh);

	(void)nt;
	(void)arg;
	if (m != tlp_mwr_data(mh) || (int)count != tlp_mr_data_length(mh))
		fail(__LINE__);
	pthread_mutex_lock(&lock);
	if (addr < bar4 || addr + count > bar4 + memsize) {
		aborts++;
	} else {
		memcpy(mem + (addr - bar4), m, count);
		writes++;
	}
	pthread_mutex_unlock(&lock);
	if (addr == bar4 + memsize - 16 && count == 4 && memcmp(m, "STOP", 4) == 0)
		nettlp_stop_cb();
	return 0;
}

static int on_cpl(struct nettlp *nt, struct tlp_cpl_hdr *ch, void *arg)
{
	(void)nt;
	(void)arg;
	if (tlp_cpl_status(ch->stcnt) == TLP_CPL_STATUS_UR && ch->tag == 7)
		cpls++;
	else
		fail(__LINE__);
	return 0;
}

static int on_cpld(struct nettlp *nt, struct tlp_cpl_hdr *ch, void *m, size_t count, void *arg)
{
	const unsigned char *d = m;

	(void)nt;
	(void)arg;
	/* The harness put "host-mem" at host address 0x103. */
	if (count == 8 && m == tlp_cpld_data(ch) && tlp_cpld_data_length(ch) == 8 &&
	    tlp_cpl_bcnt(ch->stcnt) == 8 && memcmp(d, "host-mem", 8) == 0)
		cplds++;
	else
		fail(__LINE__);
	return 0;
}

static int on_other(struct nettlp *nt, struct tlp_hdr *th, void *arg)
{
	(void)nt;
	(void)th;
	(void)arg;
	others++;
	return 0;
}

/* A raw 3DW MRd of `len` bytes at `addr`, written to the context's socket. */
static void raw_mrd(struct nettlp *nt, uintptr_t addr, int len)
{
	unsigned char buf[6 + 16];
	struct tlp_mr_hdr *mh = (struct tlp_mr_hdr *)(buf + 6);
	uint32_t *a = (uint32_t *)(buf + 6 + 8);
	size_t n = 6 + 12;

	memset(buf, 0, sizeof(buf));
	tlp_set_fmt(mh->tlp.fmt_type, TLP_FMT_3DW, TLP_FMT_WO_DATA);
	tlp_set_type(mh->tlp.fmt_type, TLP_TYPE_MRd);
	tlp_set_length(mh->tlp.falen, tlp_calculate_length(addr, len));
	mh->requester = htons(nt->requester);
	mh->tag = nt->tag;
	mh->fstdw = tlp_calculate_fstdw(addr, len);
	mh->lstdw = tlp_calculate_lstdw(addr, len);
	if (addr > 0xffffffffULL) {
		tlp_set_fmt(mh->tlp.fmt_type, TLP_FMT_4DW, TLP_FMT_WO_DATA);
		a[0] = htonl((uint32_t)(addr >> 32));
		a[1] = htonl((uint32_t)addr & ~3u);
		n = 6 + 16;
	} else {
		a[0] = htonl((uint32_t)addr & ~3u);
	}
	if (write(nt->sockfd, buf, n) != (ssize_t)n)
		fail(__LINE__);
}

static struct nettlp_cb cb;
static struct nettlp libctx;

static void *libtlp_side(void *unused)
{
	struct nettlp *one[1] = { &libctx };

	(void)unused;
	nettlp_run_cb(one, 1, &cb, NULL);
	return NULL;
}

int main(int argc, char **argv)
{
	struct in_addr adapter, local;
	struct nettlp nts[16];
	struct nettlp *pnts[16];
	pthread_t th;
	int i;

	if (argc != 5) {
		fprintf(stderr, "usage: psmem_cb BAR4_HEX SIZE ADAPTER_IP LOCAL_IP\n");
		return 2;
	}
	bar4 = (uintptr_t)strtoull(argv[1], NULL, 16);
	memsize = (size_t)strtoull(argv[2], NULL, 0);
	mem = calloc(1, memsize);
	if (inet_pton(AF_INET, argv[3], &adapter) != 1 || inet_pton(AF_INET, argv[4], &local) != 1) {
		fprintf(stderr, "psmem_cb: bad address\n");
		return 2;
	}

	for (i = 0; i < 16; i++) {
		memset(&nts[i], 0, sizeof(nts[i]));
		nts[i].remote_addr = adapter;
		nts[i].local_addr = local;
		nts[i].requester = 0x1b00;
		nts[i].tag = (uint8_t)i;
		nts[i].dir = DMA_ISSUED_BY_ADAPTER;
		if (nettlp_init(&nts[i]) < 0) {
			perror("nettlp_init");
			return 1;
		}
		pnts[i] = &nts[i];
	}
	memset(&libctx, 0, sizeof(libctx));
	libctx.remote_addr = adapter;
	libctx.local_addr = local;
	libctx.requester = 0x1b00;
	libctx.tag = 7;
	libctx.dir = DMA_ISSUED_BY_LIBTLP;
	if (nettlp_init(&libctx) < 0) {
		perror("nettlp_init");
		return 1;
	}

	memset(&cb, 0, sizeof(cb));
	cb.mrd = on_mrd;
	cb.mwr = on_mwr;
	cb.cpl = on_cpl;
	cb.cpld = on_cpld;
	cb.other = on_other;

	/* Too many contexts is an error. */
	errno = 0;
	if (nettlp_run_cb(pnts, 17, &cb, NULL) != -1 || errno != EINVAL)
		fail(__LINE__);

	/* Completions for the LibTLP-side context: a CplD and a UR Cpl. */
	raw_mrd(&libctx, 0x103, 8);
	raw_mrd(&libctx, 0x7ff00000000ULL, 8);
	pthread_create(&th, NULL, libtlp_side, NULL);

	printf("psmem_cb: ready\n");
	fflush(stdout);
	nettlp_run_cb(pnts, 16, &cb, NULL);
	pthread_join(th, NULL);

	printf("psmem_cb: reads %d writes %d aborts %d cpld %d cpl %d other %d failures %d\n",
	       reads, writes, aborts, cplds, cpls, others, failures);
	return (failures == 0 && cplds == 1 && cpls == 1) ? 0 : 1;
}
