/* The leader's walks over what a producer sends, in C: the uncompressed records of a v2 batch,
 * and a run of uncompressed v0/v1 messages (a v1 wrapper's inner set, or a set sent without
 * compression). tidelog/records/record_batch.py's check_records_python and
 * tidelog/records/validation.py's plain_run_python are the same walks in Python, the references;
 * tests/records/test_record_batch.py and tests/records/test_validation.py check that both give
 * the same answers, faults included.
 *
 * check_records(data, count, keys_required) -> (low, high, index_of_high) | str
 *
 * Each of `count` records must fill its length exactly, carry its index as offset delta, have
 * key, value and headers inside it (a null key refused with keys_required, a null header key
 * always), and the records must fill `data`. The answer is the smallest and largest timestamp
 * delta and the index of the first record with the largest, or a string naming the first
 * fault (the caller raises CORRUPT_MESSAGE with it).
 *
 * plain_run(buffer, position, limit, magic, max_size, compacted, now, max_difference,
 *           append_time, assign_from)
 *     -> (position, count, max_timestamp, index_of_max, in_order, bad_timestamp)
 *
 * See plain_run_python: the run stops at the first entry that is not an uncompressed message of
 * `magic` passing its checks. assign_from >= 0 rewrites offsets (and, with append_time >= 0 in
 * v1, stamps LogAppendTime, CRC included) in the writable buffer; max_difference < 0 checks no
 * CreateTime. bad_timestamp is None, or the first CreateTime further than max_difference from
 * `now` (the walk stops there; the caller raises INVALID_TIMESTAMP).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A zigzag varint at *position (at most ten bytes, before limit); 0 on success. */
static int read_varint(const unsigned char *data, Py_ssize_t *position, Py_ssize_t limit,
                       int64_t *value)
{
    uint64_t result = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*position >= limit)
            return -1;
        unsigned char byte = data[(*position)++];
        result |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *value = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            return 0;
        }
    }
    return -2;
}

/* Inside check_records: the answer is a string naming the fault, after the buffer's release. */
#define FAULT(...)                                                                         \
    do {                                                                                   \
        answer = PyUnicode_FromFormat(__VA_ARGS__);                                        \
        goto done;                                                                         \
    } while (0)
#define VARINT(target, limit)                                                              \
    do {                                                                                   \
        int failed = read_varint(data, &position, (limit), &(target));                     \
        if (failed == -1)                                                                  \
            FAULT("a varint runs past the end of its record");                             \
        if (failed == -2)                                                                  \
            FAULT("a varint is longer than ten bytes");                                    \
    } while (0)

static PyObject *check_records(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    int keys_required;
    if (!PyArg_ParseTuple(args, "y*np", &view, &count, &keys_required))
        return NULL;
    const unsigned char *data = view.buf;
    Py_ssize_t position = 0, end = view.len;
    int64_t low = INT64_MAX, high = INT64_MIN;
    Py_ssize_t index_of_high = 0;
    PyObject *answer = NULL;
    for (Py_ssize_t index = 0; index < count; index++) {
        int64_t length, timestamp_delta, offset_delta, size, headers;
        VARINT(length, end);
        if (length < 1 || length > end - position)
            FAULT("record length %lld does not fit its batch", (long long)length);
        Py_ssize_t limit = position + (Py_ssize_t)length;
        position += 1; /* attributes */
        VARINT(timestamp_delta, limit);
        VARINT(offset_delta, limit);
        if (offset_delta != index)
            FAULT("record offset delta %lld where %zd belongs", (long long)offset_delta, index);
        if (timestamp_delta > high) {
            high = timestamp_delta;
            index_of_high = index;
        }
        if (timestamp_delta < low)
            low = timestamp_delta;
        for (int which = 0; which < 2; which++) { /* key, value */
            VARINT(size, limit);
            if (size < -1 || (size > 0 && size > limit - position))
                FAULT("a record's field runs past the end of the record");
            if (size < 0 && which == 0 && keys_required)
                FAULT("a compacted topic accepts only records with a key");
            if (size > 0)
                position += (Py_ssize_t)size;
        }
        VARINT(headers, limit);
        if (headers < 0)
            FAULT("negative header count %lld", (long long)headers);
        for (int64_t header = 0; header < headers; header++) {
            for (int which = 0; which < 2; which++) { /* header key (never null), value */
                VARINT(size, limit);
                if (size < -1 || (size < 0 && which == 0) ||
                    (size > 0 && size > limit - position))
                    FAULT("a record header does not fit its record");
                if (size > 0)
                    position += (Py_ssize_t)size;
            }
        }
        if (position != limit)
            FAULT("a record's fields do not fill its length");
    }
    if (position != end)
        FAULT("%zd bytes after a batch's %zd records", end - position, count);
    answer = Py_BuildValue("(LLn)", (long long)low, (long long)high, index_of_high);
done:
    PyBuffer_Release(&view);
    return answer;
}

/* CRC-32 (zlib's, reflected polynomial 0xEDB88320), eight bytes a step. */
static uint32_t crc_table[8][256];

static void crc_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            crc_table[k][n] = crc_table[0][crc_table[k - 1][n] & 0xff] ^ (crc_table[k - 1][n] >> 8);
}

static uint32_t crc32_of(const unsigned char *data, Py_ssize_t length)
{
    uint32_t c = 0xFFFFFFFFu;
    while (length >= 8) {
        uint32_t low = c ^ ((uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                            (uint32_t)data[3] << 24);
        uint32_t high = (uint32_t)data[4] | (uint32_t)data[5] << 8 | (uint32_t)data[6] << 16 |
                        (uint32_t)data[7] << 24;
        c = crc_table[7][low & 0xff] ^ crc_table[6][(low >> 8) & 0xff] ^
            crc_table[5][(low >> 16) & 0xff] ^ crc_table[4][low >> 24] ^
            crc_table[3][high & 0xff] ^ crc_table[2][(high >> 8) & 0xff] ^
            crc_table[1][(high >> 16) & 0xff] ^ crc_table[0][high >> 24];
        data += 8;
        length -= 8;
    }
    while (length--)
        c = crc_table[0][(c ^ *data++) & 0xff] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static int64_t get_int64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

static int32_t get_int32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static void put_int64(unsigned char *p, int64_t value)
{
    uint64_t v = (uint64_t)value;
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)v;
}

static void put_int32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

#define LOG_OVERHEAD 12
#define CODEC_MASK 0x07
#define TIMESTAMP_TYPE_BIT 0x08

static PyObject *plain_run(PyObject *self, PyObject *args)
{
    PyObject *buffer;
    Py_ssize_t position, limit, max_size;
    int magic, compacted;
    long long now, max_difference, append_time, assign_from;
    if (!PyArg_ParseTuple(args, "OnninpLLLL", &buffer, &position, &limit, &magic, &max_size,
                          &compacted, &now, &max_difference, &append_time, &assign_from))
        return NULL;
    if (magic != 0 && magic != 1) {
        PyErr_Format(PyExc_ValueError, "plain_run of magic %d", magic);
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buffer, &view, assign_from >= 0 ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return NULL;
    if (position < 0 || limit > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "plain_run outside its buffer");
        return NULL;
    }
    unsigned char *data = view.buf;
    const int v1 = magic == 1;
    const Py_ssize_t header_size = v1 ? 30 : 22;     /* up to and with the key length */
    const Py_ssize_t key_length_at = v1 ? 26 : 18;   /* from the entry's start */
    const Py_ssize_t min_size = v1 ? 22 : 14;
    Py_ssize_t count = 0, index_of_max = -1;
    long long max_timestamp = -1;
    int in_order = 1, bad = 0;
    long long bad_timestamp = 0;
    while (limit - position >= header_size) {
        unsigned char *entry = data + position;
        int64_t offset = get_int64(entry);
        int32_t size = get_int32(entry + 8);
        uint32_t crc = (uint32_t)get_int32(entry + 12);
        int found_magic = (signed char)entry[16];
        int attributes = entry[17];
        int64_t timestamp = v1 ? get_int64(entry + 18) : -1;
        int32_t key_length = get_int32(entry + key_length_at);
        if (found_magic != magic || attributes & CODEC_MASK || size < min_size || size > max_size ||
            size > limit - position - LOG_OVERHEAD || key_length < -1 ||
            (key_length < 0 && compacted))
            break;
        Py_ssize_t end = position + LOG_OVERHEAD + size;
        Py_ssize_t value_length_at =
            position + key_length_at + 4 + (key_length > 0 ? (Py_ssize_t)key_length : 0);
        if (value_length_at + 4 > end)
            break;
        int32_t value_length = get_int32(data + value_length_at);
        Py_ssize_t value_end =
            value_length_at + 4 + (value_length > 0 ? (Py_ssize_t)value_length : 0);
        if (value_length < -1 || value_end != end ||
            crc32_of(entry + 16, end - position - 16) != crc)
            break;
        if (assign_from < 0)
            in_order = in_order && offset == count;
        else if (assign_from > INT64_MAX - count)
            break; /* the offset would wrap round: the caller refuses such runs before */
        else
            put_int64(entry, assign_from + count); /* the size stays as it is */
        if (v1) {
            if (append_time >= 0 && assign_from >= 0) {
                unsigned char *message = entry + LOG_OVERHEAD;
                message[5] |= TIMESTAMP_TYPE_BIT;
                put_int64(message + 6, append_time);
                put_int32(message, crc32_of(message + 4, end - position - LOG_OVERHEAD - 4));
                timestamp = append_time;
            } else if (max_difference >= 0) {
                __int128 difference = (__int128)timestamp - (__int128)now;
                if (difference < 0)
                    difference = -difference;
                if (difference > (__int128)max_difference) {
                    bad = 1;
                    bad_timestamp = timestamp;
                    break;
                }
            }
            if (timestamp > max_timestamp) {
                max_timestamp = timestamp;
                index_of_max = count;
            }
        }
        count++;
        position = end;
    }
    PyBuffer_Release(&view);
    if (bad)
        return Py_BuildValue("(nnLnNL)", position, count, max_timestamp, index_of_max,
                             PyBool_FromLong(in_order), bad_timestamp);
    return Py_BuildValue("(nnLnNO)", position, count, max_timestamp, index_of_max,
                         PyBool_FromLong(in_order), Py_None);
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS,
     "check_records(data, count, keys_required) -> (low, high, index_of_high) or a string "
     "naming the first fault of an uncompressed v2 records section."},
    {"plain_run", plain_run, METH_VARARGS,
     "plain_run(buffer, position, limit, magic, max_size, compacted, now, max_difference, "
     "append_time, assign_from) -> (position, count, max_timestamp, index_of_max, in_order, "
     "bad_timestamp): validation.plain_run_python's walk over v0/v1 messages."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_walk(void)
{
    crc_init();
    return PyModule_Create(&module);
}
