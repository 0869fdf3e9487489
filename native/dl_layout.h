/* On-disk layout of a DLedger store (byte-compatible with Java DLedger 0.2.7-0.4.0).
 * The same values live in dledger/entry.py; a unit test checks they agree. */
#ifndef DL_LAYOUT_H
#define DL_LAYOUT_H

/* Entry header, big-endian, 48 bytes, then the body. */
#define DL_OFF_MAGIC      0   /* int32 */
#define DL_OFF_SIZE       4   /* int32: 48 + body length */
#define DL_OFF_INDEX      8   /* int64 */
#define DL_OFF_TERM       16  /* int64 */
#define DL_OFF_POS        24  /* int64: absolute position in the data log */
#define DL_OFF_CHANNEL    32  /* int32, reserved (0) */
#define DL_OFF_CHAIN_CRC  36  /* int32, never computed (0) */
#define DL_OFF_BODY_CRC   40  /* int32, CRC-32 of the body or 0 */
#define DL_OFF_BODY_SIZE  44  /* int32 */
#define DL_HEADER_SIZE    48  /* BODY_OFFSET in DLedger */
#define DL_MIN_ENTRY_SIZE_EXCL 44 /* recovery requires size > 44 */

/* Index unit, big-endian, 32 bytes at index * 32. Note: pos comes before size. */
#define DL_IDX_OFF_MAGIC  0   /* int32 */
#define DL_IDX_OFF_POS    4   /* int64 */
#define DL_IDX_OFF_SIZE   12  /* int32 */
#define DL_IDX_OFF_INDEX  16  /* int64 */
#define DL_IDX_OFF_TERM   24  /* int64 */
#define DL_INDEX_UNIT     32

/* Magic codes. */
#define DL_MAGIC_BLANK   (-1)
#define DL_MAGIC_NORMAL  1
#define DL_MAGIC_NOOP    2   /* DLedger 0.4.0 */
#define DL_MAGIC_RECORD  16  /* dledger-py: the body is a record (docs/FORMAT.md) */
#define DL_MIN_BLANK_LEN 8

/* Largest entry the Java leader can encode (4 MiB thread-local buffer). */
/* Record bodies (magic 16): limits the encoder and the decoder enforce. */
#define DL_REC_VERSION         1
#define DL_REC_STAMPED         2      /* version 2: a stamped record (leader-written) */
#define DL_REC_STAMP_SIZE      36     /* producer id, epoch, first seq (int64), count (uint32), time (int64) */
#define DL_REC_MAX_STAMP_COUNT 65536  /* records one stamp covers */
#define DL_REC_MAX_KEY         65536  /* key bytes */
#define DL_REC_MAX_HEADERS     1024   /* headers per record */
#define DL_REC_MAX_HEADER_KEY  1024   /* UTF-8 bytes of one header key */
#define DL_MAX_ENTRY_SIZE (4 * 1024 * 1024)

#endif
