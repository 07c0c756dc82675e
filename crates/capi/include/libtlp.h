/*
 * libtlp.h — LibTLP-compatible NetTLP API (pcielab).
 *
 * Same names, constants and struct layouts as LibTLP, so its programs build unchanged;
 * the behaviour is corrected (see crates/capi/README.md): DMA of any size is split by
 * MRRS/MPS and 4 KiB, completions are fully checked, *_aligned return the total,
 * UR/CA/timeouts give EOPNOTSUPP/ECONNABORTED/ETIME.
 */
#ifndef _LIBTLP_H_
#define _LIBTLP_H_

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include <netinet/in.h>

#include <tlp.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NETTLP_MSG_PORT			0x2FFF	/* messaging API (12287) */
#define NETTLP_LIBTLP_PORT_BASE		0x3000	/* + tag: requests issued by LibTLP */
#define NETTLP_ADAPTER_PORT_BASE	0x4000	/* + (tag & 0xF): requests from the host */

/* The 6-byte header in front of every TLP (big endian on the wire). */
struct nettlp_hdr {
	uint16_t seq;
	uint32_t tstamp;
} __attribute__((packed));

enum dma_direction {
	DMA_ISSUED_BY_LIBTLP = 0,
	DMA_ISSUED_BY_ADAPTER = 1,
};

/* One context: fill the configuration fields, then call nettlp_init(). */
struct nettlp {
	struct in_addr remote_addr;	/* the adapter */
	struct in_addr local_addr;	/* this host's address towards the adapter */
	uint16_t requester;		/* bus << 8 | devfn, host order */
	uint8_t tag;
	enum dma_direction dir;

	int sockfd;			/* set by nettlp_init */
	uint16_t port;			/* set by nettlp_init */
};

int nettlp_init(struct nettlp *nt);

/* DMA into host memory; return the number of bytes moved, or -1 with errno. */
ssize_t dma_read(struct nettlp *nt, uintptr_t addr, void *buf, size_t count);
ssize_t dma_write(struct nettlp *nt, uintptr_t addr, void *buf, size_t count);
ssize_t dma_read_aligned(struct nettlp *nt, uintptr_t addr, void *buf,
			 size_t count, size_t mrrs);
ssize_t dma_write_aligned(struct nettlp *nt, uintptr_t addr, void *buf,
			  size_t count, size_t mps);

/* Callbacks for TLPs received by nettlp_run_cb(); NULL ones go to `other`. */
struct nettlp_cb {
	uintptr_t start;	/* unused */
	uintptr_t end;		/* unused */
	int (*mrd)(struct nettlp *nt, struct tlp_mr_hdr *mh, void *arg);
	int (*mwr)(struct nettlp *nt, struct tlp_mr_hdr *mh,
		   void *m, size_t count, void *arg);
	int (*cpl)(struct nettlp *nt, struct tlp_cpl_hdr *ch, void *arg);
	int (*cpld)(struct nettlp *nt, struct tlp_cpl_hdr *ch,
		    void *m, size_t count, void *arg);
	int (*other)(struct nettlp *nt, struct tlp_hdr *tlp, void *arg);
};

#define NETTLP_CB_MAX_NTS	16

int nettlp_run_cb(struct nettlp **nt, int nnts,
		  struct nettlp_cb *cb, void *arg);
void nettlp_stop_cb(void);

/* Messaging API (answered by the adapter host on NETTLP_MSG_PORT). */
#define NETTLP_MSG_GET_BAR4_ADDR	1
#define NETTLP_MSG_GET_DEV_ID		2
#define NETTLP_MSG_GET_MSIX_TABLE	3

#define NETTLP_MAX_VEC	16

uintptr_t nettlp_msg_get_bar4_start(struct in_addr addr);
uint16_t nettlp_msg_get_dev_id(struct in_addr addr);

struct nettlp_msix {
	uint64_t addr;
	uint32_t data;
} __attribute__((__packed__));

int nettlp_msg_get_msix_table(struct in_addr addr, struct nettlp_msix *msix,
			      int msix_count);

/* PCIe configuration API (6-byte packets; port 0x4001, PCIELAB_CFG_PORT overrides). */
#define NETTLP_PCIE_CFG_PORT	0x4001

struct nettlp_pcie_cfg {
	struct in_addr remote_addr;
	struct in_addr local_addr;
	int sockfd;		/* set by nettlp_pcie_cfg_init */
};

int nettlp_pcie_cfg_init(struct nettlp_pcie_cfg *ntpc);
ssize_t nettlp_pcie_cfg_read(struct nettlp_pcie_cfg *ntpc, uint16_t addr,
			     void *buf, size_t count);
ssize_t nettlp_pcie_cfg_write(struct nettlp_pcie_cfg *ntpc, uint16_t addr,
			      void *buf, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* _LIBTLP_H_ */
