/*
 * dma_test.c — a LibTLP program using every device-side call of libtlp.h against
 * `pcielab adapter` on loopback.
 * Usage: dma_test BAR4_HEX ADAPTER_IP LOCAL_IP. Exit status 0 and "dma_test: OK" on
 * success; the first failed check prints itself and exits with status 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <libtlp.h>

#define CHECK(cond, ...) do { \
	if (!(cond)) { \
		fprintf(stderr, "dma_test: FAIL %s:%d: ", __FILE__, __LINE__); \
		fprintf(stderr, __VA_ARGS__); \
		fprintf(stderr, "\n"); \
		exit(1); \
	} \
} while (0)

static unsigned char pat(uintptr_t a, int salt)
{
	return (unsigned char)((a * 31u) ^ (a >> 8) ^ (unsigned)salt);
}

int main(int argc, char **argv)
{
	struct in_addr adapter, local;
	struct nettlp nt;
	struct nettlp_msix msix[NETTLP_MAX_VEC];
	struct nettlp_pcie_cfg cfg;
	unsigned char wbuf[9000], rbuf[9000];
	uintptr_t bar4_expected, bar4;
	uint16_t devid;
	ssize_t n;
	int size, off, i;

	if (argc != 4) {
		fprintf(stderr, "usage: dma_test BAR4_HEX ADAPTER_IP LOCAL_IP\n");
		return 2;
	}
	bar4_expected = (uintptr_t)strtoull(argv[1], NULL, 16);
	if (inet_pton(AF_INET, argv[2], &adapter) != 1 || inet_pton(AF_INET, argv[3], &local) != 1) {
		fprintf(stderr, "dma_test: bad address\n");
		return 2;
	}

	/* Messaging API. */
	bar4 = nettlp_msg_get_bar4_start(adapter);
	CHECK(bar4 == bar4_expected, "BAR4 %#lx, expected %#lx", (unsigned long)bar4, (unsigned long)bar4_expected);
	devid = nettlp_msg_get_dev_id(adapter);
	CHECK(devid == 0x1b00, "device ID %#x", devid);
	memset(msix, 0, sizeof(msix));
	CHECK(nettlp_msg_get_msix_table(adapter, msix, NETTLP_MAX_VEC) == 0, "MSI-X table: %s", strerror(errno));
	CHECK(msix[1].addr == 0xfee01000ULL && msix[1].data == 0x4021, "MSI-X[1] %#llx %#x",
	      (unsigned long long)msix[1].addr, msix[1].data);
	CHECK(sizeof(struct nettlp_msix) == 12, "nettlp_msix is %zu bytes", sizeof(struct nettlp_msix));

	/* TLP helpers (values from the spec: 0x100000003/7 B and 0x2011/6 B). */
	CHECK(tlp_calculate_length(0x100000003ULL, 7) == 3, "length");
	CHECK(tlp_calculate_fstdw(0x100000003ULL, 7) == 0x8, "fstdw");
	CHECK(tlp_calculate_lstdw(0x100000003ULL, 7) == 0x3, "lstdw");
	CHECK(tlp_calculate_fstdw(0x2011, 6) == 0xe && tlp_calculate_lstdw(0x2011, 6) == 0x7, "BEs 0x2011");

	/* A context for DMA issued by this program. */
	memset(&nt, 0, sizeof(nt));
	nt.remote_addr = adapter;
	nt.local_addr = local;
	nt.requester = devid;
	nt.tag = 3;
	nt.dir = DMA_ISSUED_BY_LIBTLP;
	CHECK(nettlp_init(&nt) == 0, "nettlp_init: %s", strerror(errno));
	CHECK(nt.port == 0x3003, "port %#x", nt.port);

	/* Every size 1..300 at offsets 0..7: write, read back. */
	for (off = 0; off < 8; off++) {
		for (size = 1; size <= 300; size++) {
			uintptr_t a = 0x10000 + (uintptr_t)off + (uintptr_t)size * 512;
			for (i = 0; i < size; i++)
				wbuf[i] = pat(a + i, size);
			n = dma_write(&nt, a, wbuf, size);
			CHECK(n == size, "dma_write %d at %#lx returned %zd", size, (unsigned long)a, n);
			memset(rbuf, 0xee, sizeof(rbuf));
			n = dma_read(&nt, a, rbuf, size);
			CHECK(n == size, "dma_read %d at %#lx returned %zd (%s)", size, (unsigned long)a, n, strerror(errno));
			CHECK(memcmp(rbuf, wbuf, size) == 0, "data of %d B at %#lx", size, (unsigned long)a);
		}
	}

	/* Large and page-crossing transfers with the _aligned variants: total returned. */
	for (i = 0; i < 8192; i++)
		wbuf[i] = pat(i, 77);
	n = dma_write_aligned(&nt, 0x20ffd, wbuf, 8192, 128);
	CHECK(n == 8192, "dma_write_aligned returned %zd", n);
	memset(rbuf, 0, sizeof(rbuf));
	n = dma_read_aligned(&nt, 0x20ffd, rbuf, 8192, 256);
	CHECK(n == 8192, "dma_read_aligned returned %zd (LibTLP returned the last chunk)", n);
	CHECK(memcmp(rbuf, wbuf, 8192) == 0, "aligned data");
	/* Plain calls above 4 KiB are split too (LibTLP corrupted the header). */
	n = dma_read(&nt, 0x20ffd, rbuf, 6000);
	CHECK(n == 6000 && memcmp(rbuf, wbuf, 6000) == 0, "6000-byte dma_read");

	/* Outside the adapter's memory window: Unsupported Request. */
	errno = 0;
	n = dma_read(&nt, 0x7ff00000000ULL, rbuf, 64);
	CHECK(n == -1 && errno == EOPNOTSUPP, "UR read returned %zd errno %d", n, errno);
	/* Bad sizes. */
	errno = 0;
	n = dma_read_aligned(&nt, 0x1000, rbuf, 16, 100);
	CHECK(n == -1 && errno == EINVAL, "bad MRRS returned %zd errno %d", n, errno);

	/* PCIe configuration API. */
	memset(&cfg, 0, sizeof(cfg));
	cfg.remote_addr = adapter;
	cfg.local_addr = local;
	CHECK(nettlp_pcie_cfg_init(&cfg) == 0, "cfg init: %s", strerror(errno));
	{
		unsigned char id[4] = {0}, v = 0x0b, back = 0;
		CHECK(nettlp_pcie_cfg_read(&cfg, 0, id, 4) == 4, "cfg read");
		CHECK(id[0] == 0x76 && id[1] == 0x37 && id[2] == 0x22 && id[3] == 0x80,
		      "vendor/device %02x%02x %02x%02x", id[1], id[0], id[3], id[2]);
		CHECK(nettlp_pcie_cfg_write(&cfg, 0x3c, &v, 1) == 1, "cfg write");
		CHECK(nettlp_pcie_cfg_read(&cfg, 0x3c, &back, 1) == 1 && back == 0x0b, "cfg readback %#x", back);
	}

	/* An MSI-X interrupt: vector 2. */
	{
		uint32_t data = msix[2].data;
		CHECK(dma_write(&nt, msix[2].addr, &data, 4) == 4, "MSI-X write");
	}

	/* A marker the test harness checks in host memory. */
	CHECK(dma_write(&nt, 0x30000, "C-DONE", 6) == 6, "marker");

	printf("sizes %zu %zu %zu %zu %zu %zu\n", sizeof(struct nettlp), sizeof(struct nettlp_cb),
	       sizeof(struct nettlp_pcie_cfg), sizeof(struct nettlp_msix),
	       sizeof(struct tlp_mr_hdr), sizeof(struct tlp_cpl_hdr));
	printf("dma_test: OK\n");
	return 0;
}
