// ckpt_seal.c: a checksum over the whole checkpoint file, checked before HDF5 parses it. The
// tensors carry CRC-32C checksums of their own, but HDF5 reads a file's headers and attribute
// messages first, and HDF5 1.10 can crash on damaged ones (found by fuzzing checkpoints under
// ASan). So the writer puts CK_SEAL_BYTES before the HDF5 image (HDF5 looks for its superblock
// at byte 512 too, and takes what comes before it for a user block), holding the CRC-32C and
// length of the whole file after them; a reader that finds the seal checks every byte before
// HDF5 sees any. Checkpoints from before the seal (the HDF5 signature at byte 0) are read as
// they were.
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_h5.h"
#include "galley/tfevents.h"  // crc32c

static const char hdf5_sig[8] = {'\211', 'H', 'D', 'F', '\r', '\n', '\032', '\n'};
#define SEAL_FMT "galley checkpoint seal 1\ncrc32c %08" PRIx32 "\nbytes %" PRIu64 "\n"

void ck_seal(char *image, size_t size) {
    memset(image, 0, CK_SEAL_BYTES);
    uint32_t crc = crc32c(0, image + CK_SEAL_BYTES, size - CK_SEAL_BYTES);
    snprintf(image, CK_SEAL_BYTES, SEAL_FMT, crc, (uint64_t)size);
}

int ck_check_seal(const char *path, char *err, size_t errlen) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return 0;  // ck_open says why it cannot be opened
    char head[CK_SEAL_BYTES + 8];
    size_t got = fread(head, 1, sizeof head, fp);
    int rc = 0;
    static const char magic[] = "galley checkpoint seal ";
    bool sealed = got >= sizeof magic - 1 && memcmp(head, magic, sizeof magic - 1) == 0;
    if (!sealed && got >= 8 && memcmp(head, hdf5_sig, 8) == 0) {
        rc = 0;  // no user block: a checkpoint from before the seal
    } else if (sealed && (got < sizeof head || memcmp(head + CK_SEAL_BYTES, hdf5_sig, 8) != 0)) {
        snprintf(err, errlen, "%s is damaged: %s", path,
                 got < sizeof head ? "it ends inside its seal (truncated)" : "its HDF5 signature after the seal is gone");
        rc = -1;
    } else if (got == sizeof head && memcmp(head + CK_SEAL_BYTES, hdf5_sig, 8) == 0) {
        uint32_t want = 0;
        uint64_t bytes = 0;
        char again[CK_SEAL_BYTES];
        head[CK_SEAL_BYTES - 1] = '\0';
        int ok = sscanf(head, "galley checkpoint seal 1\ncrc32c %8" SCNx32 "\nbytes %" SCNu64, &want, &bytes) == 2;
        // The seal must read back exactly as the writer made it, zeros after it included.
        if (ok) {
            memset(again, 0, sizeof again);
            snprintf(again, sizeof again, SEAL_FMT, want, bytes);
            ok = memcmp(again, head, CK_SEAL_BYTES - 1) == 0;
        }
        if (!ok) {
            snprintf(err, errlen, "%s is damaged: its seal (the first %d bytes) is not galley's", path, CK_SEAL_BYTES);
            rc = -1;
        } else {
            uint32_t crc = crc32c(0, head + CK_SEAL_BYTES, 8);
            uint64_t seen = sizeof head;
            char *buf = malloc(1 << 20);
            size_t n;
            errno = 0;
            while (buf && (n = fread(buf, 1, 1 << 20, fp)) > 0) crc = crc32c(crc, buf, n), seen += n;
            int rerr = !buf || ferror(fp);
            free(buf);
            if (rerr) {
                snprintf(err, errlen, "%s cannot be read: %s", path, strerror(errno ? errno : EIO));
                rc = -1;
            } else if (seen != bytes) {
                snprintf(err, errlen, "%s is damaged: it has %" PRIu64 " bytes, its seal says %" PRIu64
                         " (truncated, or written over)", path, seen, bytes);
                rc = -1;
            } else if (crc != want) {
                snprintf(err, errlen, "%s is damaged: its bytes fail the file's checksum (crc32c %08" PRIx32
                         ", the seal says %08" PRIx32 ")", path, crc, want);
                rc = -1;
            }
        }
    }
    fclose(fp);
    return rc;
}
