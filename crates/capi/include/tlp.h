/*
 * tlp.h — PCIe TLP header layouts and helpers, LibTLP-compatible (pcielab).
 *
 * Headers are in wire order (big-endian fields); the 16-bit fields are read with
 * ntohs(). The structs are packed so that a pointer into a received datagram can be
 * used directly.
 */
#ifndef _TLP_H_
#define _TLP_H_

#include <stdint.h>
#include <stddef.h>
#include <endian.h>
#include <arpa/inet.h>

#ifdef __cplusplus
extern "C" {
#endif

/* First DW common to every TLP. */
struct tlp_hdr {
	uint8_t  fmt_type;	/* Fmt (bits 6:5) and Type (bits 4:0) */
	uint8_t  tclass;	/* TC in bits 6:4 */
	uint16_t falen;		/* TD, EP, Attr, AT and Length (big endian) */
} __attribute__((packed));

/* Fmt */
#define TLP_FMT_DW_MASK		0x20
#define TLP_FMT_3DW		0x00
#define TLP_FMT_4DW		0x20
#define TLP_FMT_DATA_MASK	0x40
#define TLP_FMT_WO_DATA		0x00
#define TLP_FMT_W_DATA		0x40

#define tlp_fmt_dw(ft)		((ft) & TLP_FMT_DW_MASK)
#define tlp_is_3dw(ft)		(tlp_fmt_dw(ft) == TLP_FMT_3DW)
#define tlp_is_4dw(ft)		(tlp_fmt_dw(ft) == TLP_FMT_4DW)
#define tlp_fmt_data(ft)	((ft) & TLP_FMT_DATA_MASK)
#define tlp_is_wo_data(ft)	(tlp_fmt_data(ft) == TLP_FMT_WO_DATA)
#define tlp_is_w_data(ft)	(tlp_fmt_data(ft) == TLP_FMT_W_DATA)
#define tlp_set_fmt(ft, dw, wd) \
	((ft) = (uint8_t)(((ft) & ~(TLP_FMT_DW_MASK | TLP_FMT_DATA_MASK)) | \
			  ((dw) & TLP_FMT_DW_MASK) | ((wd) & TLP_FMT_DATA_MASK)))

/* Type */
#define TLP_TYPE_MASK		0x1F
#define TLP_TYPE_MRd		0x00
#define TLP_TYPE_MRdLk		0x01
#define TLP_TYPE_MWr		0x00
#define TLP_TYPE_Cpl		0x0A

#define tlp_type(ft)		((ft) & TLP_TYPE_MASK)
#define tlp_is_mrd(ft)		(tlp_type(ft) == TLP_TYPE_MRd && tlp_is_wo_data(ft))
#define tlp_is_mwr(ft)		(tlp_type(ft) == TLP_TYPE_MWr && tlp_is_w_data(ft))
#define tlp_is_cpl(ft)		(tlp_type(ft) == TLP_TYPE_Cpl)
#define tlp_set_type(ft, v) \
	((ft) = (uint8_t)(((ft) & ~TLP_TYPE_MASK) | ((v) & TLP_TYPE_MASK)))

/* Traffic class */
#define TLP_TCLASS_MASK		0x70
#define tlp_tclass(tc)		(((tc) & TLP_TCLASS_MASK) >> 4)
#define tlp_set_tclass(tc, v)	((tc) = (uint8_t)(((v) << 4) & TLP_TCLASS_MASK))

/* Flags: TD (digest) and EP (poisoned) */
#define TLP_FLAG_MASK		0xC000
#define TLP_FLAG_DIGEST_MASK	0x8000
#define TLP_FLAG_EP_MASK	0x4000
#define tlp_flag(fl)		(ntohs(fl) & TLP_FLAG_MASK)
#define tlp_flag_digest(fl)	(tlp_flag(fl) & TLP_FLAG_DIGEST_MASK)
#define tlp_flag_set_digest(fl)	((fl) |= htons(TLP_FLAG_DIGEST_MASK))
#define tlp_flag_unset_digest(fl) ((fl) &= (uint16_t)~htons(TLP_FLAG_DIGEST_MASK))
#define tlp_flag_ep(fl)		(tlp_flag(fl) & TLP_FLAG_EP_MASK)
#define tlp_flag_set_ep(fl)	((fl) |= htons(TLP_FLAG_EP_MASK))
#define tlp_flag_unset_ep(fl)	((fl) &= (uint16_t)~htons(TLP_FLAG_EP_MASK))

/* Attributes: relaxed ordering and no snoop */
#define TLP_ATTR_MASK		0x3000
#define TLP_ATTR_RELAX_MASK	0x2000
#define TLP_ATTR_NOSNP_MASK	0x1000
#define tlp_attr(fl)		(ntohs(fl) & TLP_ATTR_MASK)
#define tlp_attr_relax(fl)	(tlp_attr(fl) & TLP_ATTR_RELAX_MASK)
#define tlp_attr_set_relax(fl)	((fl) |= htons(TLP_ATTR_RELAX_MASK))
#define tlp_attr_unset_relax(fl) ((fl) &= (uint16_t)~htons(TLP_ATTR_RELAX_MASK))
#define tlp_attr_nosnp(fl)	(tlp_attr(fl) & TLP_ATTR_NOSNP_MASK)
#define tlp_attr_set_nosnp(fl)	((fl) |= htons(TLP_ATTR_NOSNP_MASK))
#define tlp_attr_unset_nosnp(fl) ((fl) &= (uint16_t)~htons(TLP_ATTR_NOSNP_MASK))

/* Length in DW (0 encodes 1024). pcielab masks the value (LibTLP did not). */
#define TLP_LENGTH_MASK		0x03FF
#define tlp_length(fl)		(ntohs(fl) & TLP_LENGTH_MASK)
#define tlp_set_length(fl, v) \
	((fl) = htons((uint16_t)((ntohs(fl) & ~TLP_LENGTH_MASK) | ((v) & TLP_LENGTH_MASK))))

/* Memory request header (3DW; a 4DW header has one more address DW). */
struct tlp_mr_hdr {
	struct tlp_hdr tlp;
	uint16_t requester;	/* big endian */
	uint8_t  tag;
#if __BYTE_ORDER == __LITTLE_ENDIAN
	uint8_t  fstdw : 4;	/* First DW Byte Enables */
	uint8_t  lstdw : 4;	/* Last DW Byte Enables */
#else
	uint8_t  lstdw : 4;
	uint8_t  fstdw : 4;
#endif
} __attribute__((packed));

/* Bus and devfn of a big-endian ID field. */
#define tlp_id_to_bus(id)	(ntohs(id) >> 8)
#define tlp_id_to_device(id)	(ntohs(id) & 0x00FF)

/* Byte enables and DW length of a request of `count` bytes at `addr`. */
int tlp_calculate_lstdw(uintptr_t addr, size_t count);
int tlp_calculate_fstdw(uintptr_t addr, size_t count);
int tlp_calculate_length(uintptr_t addr, size_t count);

/* Address of the first enabled byte of a memory request. */
uintptr_t tlp_mr_addr(struct tlp_mr_hdr *mh);
/* Bytes read or written by a memory request (Length and byte enables). */
int tlp_mr_data_length(struct tlp_mr_hdr *mh);
/* First enabled byte of an MWr payload. */
void *tlp_mwr_data(struct tlp_mr_hdr *mh);

/* Completion header. */
struct tlp_cpl_hdr {
	struct tlp_hdr tlp;
	uint16_t completer;	/* big endian */
	uint16_t stcnt;		/* status (15:13), BCM (12), Byte Count (11:0) */
	uint16_t requester;	/* big endian */
	uint8_t  tag;
	uint8_t  lowaddr;	/* Lower Address (6:0) */
} __attribute__((packed));

#define TLP_CPL_STATUS_MASK	0xE000
#define TLP_CPL_STATUS_SC	0x0000	/* Successful Completion */
#define TLP_CPL_STATUS_UR	0x2000	/* Unsupported Request */
#define TLP_CPL_STATUS_CRS	0x4000	/* Configuration Request Retry Status */
#define TLP_CPL_STATUS_CA	0x8000	/* Completer Abort */
#define tlp_cpl_status(sc)	(ntohs(sc) & TLP_CPL_STATUS_MASK)
#define tlp_set_cpl_status(sc, v) \
	((sc) = htons((uint16_t)((ntohs(sc) & ~TLP_CPL_STATUS_MASK) | (v))))
#define TLP_CPL_BCNT_MASK	0x0FFF
#define tlp_cpl_bcnt(sc)	(ntohs(sc) & TLP_CPL_BCNT_MASK)
#define tlp_set_cpl_bcnt(sc, v) \
	((sc) = htons((uint16_t)((ntohs(sc) & ~TLP_CPL_BCNT_MASK) | ((v) & TLP_CPL_BCNT_MASK))))

/* Data bytes carried by this CplD, and where they start. */
int tlp_cpld_data_length(struct tlp_cpl_hdr *ch);
void *tlp_cpld_data(struct tlp_cpl_hdr *ch);

#ifdef __cplusplus
}
#endif

#endif /* _TLP_H_ */
