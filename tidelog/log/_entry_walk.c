/* The log cleaner's two loops over uncompressed entries and its offset map's probe, in C
 * (tidelog/log/compaction.py and offset_map.py hold the same loops in Python, the reference;
 * tests/log/test_cleaner_equivalence.py checks that both write the same bytes).
 *
 * Each function walks entries from `position` while they are plain messages it can take as
 * they are: whole before `limit`, of magic 0 or 1, uncompressed, at least as large as their
 * magic's fixed fields, with key (and value length) inside the entry; or format v2 batches
 * that are whole, uncompressed and not control batches, whose records all read inside them.
 * It stops at the first entry that is anything else (a compressed wrapper or batch, a partial
 * or corrupt entry, a batch emptied that has a producer id) and returns where it stopped: the
 * Python loop handles that entry, then calls again. A v2 batch some of whose records survive is
 * written again here as compaction.filter_batch writes it (the reference).
 *
 * The walks over what a compressed entry holds (map_inner, filter_inner for a v0/v1 wrapper's
 * inner messages; map_records, filter_records for a v2 batch's records section) take the
 * decompressed bytes from Python, which decompresses and compresses. They return None, having
 * changed nothing, for anything they do not take as it is (a CRC mismatch, a field reading
 * outside its message or record, an offset past int64): the Python loop then walks that entry
 * and raises or does what it always did.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define LOG_OVERHEAD 12
#define CODEC_MASK 0x07
#define HASH_BYTES 16
#define SLOT_SIZE 24

static int64_t read_int64(const unsigned char *p)
{
    uint64_t value = 0;
    for (int i = 0; i < 8; i++)
        value = (value << 8) | p[i];
    return (int64_t)value;
}

static void write_int64(unsigned char *p, int64_t value)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(value & 0xff);
        value = (int64_t)((uint64_t)value >> 8);
    }
}

static int32_t read_int32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

/* Format v2 (tidelog/records/record_batch.py has the layout). */
#define BATCH_HEADER 61
#define V2_ATTRIBUTES_AT 21
#define V2_FIRST_TIMESTAMP_AT 27
#define V2_MAX_TIMESTAMP_AT 35
#define V2_PRODUCER_ID_AT 43
#define V2_COUNT_AT 57
#define V2_CRC_AT 17
#define TIMESTAMP_TYPE_BIT 0x08
#define CONTROL_BIT 0x20

static uint32_t crc32c_table[256];

static void crc32c_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0x82f63b78u ^ (c >> 1) : c >> 1;
        crc32c_table[n] = c;
    }
}

static uint32_t crc32c(const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = 0xffffffffu;
    while (n-- > 0)
        c = crc32c_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* CRC-32 (zlib.crc32), eight bytes a step. */
static uint32_t crc32_tables[8][256];

static void crc32_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc32_tables[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            crc32_tables[t][n] =
                (crc32_tables[t - 1][n] >> 8) ^ crc32_tables[0][crc32_tables[t - 1][n] & 0xff];
}

static uint32_t crc32(const unsigned char *p, Py_ssize_t n)
{
    uint32_t c = 0xffffffffu;
    while (n >= 8) {
        uint32_t low = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                            (uint32_t)p[3] << 24);
        c = crc32_tables[7][low & 0xff] ^ crc32_tables[6][(low >> 8) & 0xff] ^
            crc32_tables[5][(low >> 16) & 0xff] ^ crc32_tables[4][low >> 24] ^
            crc32_tables[3][p[4]] ^ crc32_tables[2][p[5]] ^ crc32_tables[1][p[6]] ^
            crc32_tables[0][p[7]];
        p += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = crc32_tables[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static void write_int32(unsigned char *p, int32_t value)
{
    uint32_t v = (uint32_t)value;
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* A zigzag varint at *at, before limit; 0 when it runs past limit or ten bytes. A tenth byte's
 * bits past the 64th are dropped, as Kafka's readVarlong and Python's read_varint drop them. */
static int varint(const unsigned char *data, Py_ssize_t *at, Py_ssize_t limit, int64_t *value)
{
    uint64_t result = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*at >= limit)
            return 0;
        unsigned char byte = data[(*at)++];
        result |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *value = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            return 1;
        }
    }
    return 0;
}

/* latest[key] = offset, the key being `length` bytes at `key`; -1 with an exception set. */
static int put_key(PyObject *latest, const unsigned char *key_at, Py_ssize_t length,
                   long long offset)
{
    PyObject *key = PyBytes_FromStringAndSize((const char *)key_at, length);
    PyObject *value = key ? PyLong_FromLongLong(offset) : NULL;
    int failed = !value || PyDict_SetItem(latest, key, value) < 0;
    Py_XDECREF(key);
    Py_XDECREF(value);
    return failed ? -1 : 0;
}

static int put_varint(unsigned char *out, int64_t value)
{
    uint64_t v = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    int n = 0;
    while (v > 0x7f) {
        out[n++] = (unsigned char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

/* One record of a batch's uncompressed records section, as the walks need it. */
typedef struct {
    Py_ssize_t start, end, attributes_at, offset_delta_at, key_at;
    int64_t timestamp_delta, offset_delta, key_length, value_length;
} record_t;

/* The record at *at (before limit); 0 if any of its fields reads outside it. */
static int next_record(const unsigned char *data, Py_ssize_t *at, Py_ssize_t limit, record_t *r)
{
    int64_t length;
    r->start = *at;
    if (!varint(data, at, limit, &length) || length < 1 || length > limit - *at)
        return 0;
    r->end = *at + (Py_ssize_t)length;
    r->attributes_at = *at;
    Py_ssize_t p = *at + 1;
    if (!varint(data, &p, r->end, &r->timestamp_delta))
        return 0;
    r->offset_delta_at = p;
    if (!varint(data, &p, r->end, &r->offset_delta) || !varint(data, &p, r->end, &r->key_length))
        return 0;
    if (r->key_length < -1 || (r->key_length > 0 && r->key_length > r->end - p))
        return 0;
    r->key_at = p;
    if (r->key_length > 0)
        p += (Py_ssize_t)r->key_length;
    if (!varint(data, &p, r->end, &r->value_length) || r->value_length < -1)
        return 0;
    *at = r->end;
    return 1;
}

/* The v2 batch at `position` if the walks take it (whole, uncompressed, not control): its end,
 * base offset and record count; 0 otherwise. */
static int plain_batch(const unsigned char *data, Py_ssize_t position, Py_ssize_t limit,
                       Py_ssize_t *end, int64_t *base_offset, int32_t *count)
{
    if (limit - position < BATCH_HEADER)
        return 0;
    int32_t size = read_int32(data + position + 8);
    if (size < BATCH_HEADER - LOG_OVERHEAD || size > limit - position - LOG_OVERHEAD)
        return 0;
    if (data[position + 16] != 2)
        return 0;
    int attributes = (data[position + V2_ATTRIBUTES_AT] << 8) | data[position + V2_ATTRIBUTES_AT + 1];
    if (attributes & (CODEC_MASK | CONTROL_BIT))
        return 0;
    *count = read_int32(data + position + V2_COUNT_AT);
    if (*count < 0)
        return 0;
    *end = position + LOG_OVERHEAD + size;
    *base_offset = read_int64(data + position);
    return 1;
}

/* The plain entry at `position`: its end, offset, and where its key length field sits; 0 if
 * the entry is not one the walk takes. */
static int plain_entry(const unsigned char *data, Py_ssize_t position, Py_ssize_t limit,
                       Py_ssize_t *end, int64_t *offset, Py_ssize_t *key_length_at)
{
    if (limit - position < LOG_OVERHEAD)
        return 0;
    int32_t size = read_int32(data + position + 8);
    if (size < 14 || size > limit - position - LOG_OVERHEAD)
        return 0;
    signed char magic = (signed char)data[position + 16];
    if (magic != 0 && magic != 1)
        return 0;
    if (data[position + 17] & CODEC_MASK)
        return 0;
    if (magic == 1 && size < 22)
        return 0;
    *end = position + LOG_OVERHEAD + size;
    *offset = read_int64(data + position);
    *key_length_at = position + LOG_OVERHEAD + (magic ? 14 : 6);
    int32_t key_length = read_int32(data + *key_length_at);
    /* the key and the value length field after it lie inside the entry */
    if (key_length > 0 && key_length > *end - *key_length_at - 8)
        return 0;
    return 1;
}

static PyObject *map_plain(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t position, limit;
    PyObject *latest;
    if (!PyArg_ParseTuple(args, "y*nnO!", &view, &position, &limit, &PyDict_Type, &latest))
        return NULL;
    const unsigned char *data = view.buf;
    Py_ssize_t count = 0, end, key_length_at;
    int64_t offset;
    if (limit > view.len || position < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "a position or limit outside the buffer");
        return NULL;
    }
    for (;;) {
        int32_t records;
        if (plain_batch(data, position, limit, &end, &offset, &records)) {
            /* check the whole batch first: one that does not read is Python's to report */
            Py_ssize_t at = position + BATCH_HEADER;
            record_t r;
            int32_t n = 0;
            while (n < records && next_record(data, &at, end, &r))
                n++;
            if (n != records || at != end)
                break;
            at = position + BATCH_HEADER;
            for (n = 0; n < records; n++) {
                next_record(data, &at, end, &r);
                if (r.key_length < 0)
                    continue;
                if (put_key(latest, data + r.key_at, (Py_ssize_t)r.key_length,
                            offset + r.offset_delta) < 0) {
                    PyBuffer_Release(&view);
                    return NULL;
                }
            }
            count += records;
            position = end;
            continue;
        }
        if (!plain_entry(data, position, limit, &end, &offset, &key_length_at))
            break;
        int32_t key_length = read_int32(data + key_length_at);
        count++;
        if (key_length >= 0) {
            if (put_key(latest, data + key_length_at + 4, key_length, offset) < 0) {
                PyBuffer_Release(&view);
                return NULL;
            }
        }
        position = end;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("nn", position, count);
}

static int append_run(PyObject *out, const unsigned char *data, Py_ssize_t start, Py_ssize_t end)
{
    if (end <= start)
        return 0;
    Py_ssize_t had = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, had + (end - start)) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(out) + had, data + start, end - start);
    return 0;
}

/* The latest offset of the key at data[at:at+length]: remembered[key], else get(key); -2 on
 * an error (raised). */
static int64_t latest_offset_of(const unsigned char *data, Py_ssize_t at, Py_ssize_t length,
                                PyObject *remembered, PyObject *get)
{
    PyObject *key = PyBytes_FromStringAndSize((const char *)data + at, length);
    if (!key)
        return -2;
    PyObject *latest = PyDict_GetItemWithError(remembered, key);
    if (latest)
        Py_INCREF(latest);
    else if (!PyErr_Occurred())
        latest = PyObject_CallOneArg(get, key);
    Py_DECREF(key);
    if (!latest)
        return -2;
    int64_t offset = PyLong_AsLongLong(latest);
    Py_DECREF(latest);
    if (offset == -1 && PyErr_Occurred())
        return -2;
    return offset;
}

/* The upper bound on what write_survivors writes for `count` survivors: a record written again
 * grows by at most its new length and delta varints (ten bytes each) and its attributes. */
static Py_ssize_t survivors_bound(const record_t *survivors, int32_t count)
{
    Py_ssize_t bound = 0;
    for (int32_t i = 0; i < count; i++)
        bound += survivors[i].end - survivors[i].start + 30;
    return bound;
}

/* a + b and a - b as Java's longs make them: wrapped, where C's signed overflow is undefined */
static int64_t wrapping_add(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

static int64_t wrapping_sub(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a - (uint64_t)b);
}

/* The latest of the survivors' times (the batch's first time plus each delta, wrapped as
 * Kafka's builder sums them), at least -1 (NO_TIMESTAMP): compaction's new max timestamp. */
static int64_t latest_time(int64_t first_timestamp, const record_t *survivors, int32_t count)
{
    int64_t latest = -1;
    for (int32_t i = 0; i < count; i++) {
        int64_t time = wrapping_add(first_timestamp, survivors[i].timestamp_delta);
        if (time > latest)
            latest = time;
    }
    return latest;
}

/* Writes the `count` survivors into `out` as compaction.filter_batch writes them (attributes 0,
 * the time counted from `shift`, a wrapped difference as in Kafka, the rest as it was; a
 * record already so is copied as it is); returns how many bytes it wrote. */
static Py_ssize_t write_survivors(unsigned char *out, const unsigned char *data,
                                  const record_t *survivors, int32_t count, int log_append_time,
                                  int64_t shift)
{
    Py_ssize_t at = 0;
    for (int32_t i = 0; i < count; i++) {
        const record_t *r = &survivors[i];
        int64_t new_delta = log_append_time ? 0 : wrapping_sub(r->timestamp_delta, shift);
        if (new_delta == r->timestamp_delta && data[r->attributes_at] == 0) {
            memcpy(out + at, data + r->start, r->end - r->start);
            at += r->end - r->start;
            continue;
        }
        unsigned char delta[10];
        int delta_size = put_varint(delta, new_delta);
        Py_ssize_t rest = r->end - r->offset_delta_at;
        at += put_varint(out + at, 1 + delta_size + rest);
        out[at++] = 0;
        memcpy(out + at, delta, delta_size);
        at += delta_size;
        memcpy(out + at, data + r->offset_delta_at, rest);
        at += rest;
    }
    return at;
}

/* Appends to `out` the batch at `position` (ending at `end`) written again around its
 * `count` survivors, as compaction.filter_batch writes it; -1 on an error (raised). */
static int append_rebuilt(PyObject *out, const unsigned char *data, Py_ssize_t position,
                          Py_ssize_t end, const record_t *survivors, int32_t count)
{
    int attributes = (data[position + V2_ATTRIBUTES_AT] << 8) | data[position + V2_ATTRIBUTES_AT + 1];
    int log_append_time = attributes & TIMESTAMP_TYPE_BIT;
    int64_t first_timestamp = read_int64(data + position + V2_FIRST_TIMESTAMP_AT);
    int64_t max_timestamp = read_int64(data + position + V2_MAX_TIMESTAMP_AT);
    int64_t shift = log_append_time ? 0 : survivors[0].timestamp_delta;
    Py_ssize_t had = PyByteArray_GET_SIZE(out);
    if (PyByteArray_Resize(out, had + BATCH_HEADER + survivors_bound(survivors, count)) < 0)
        return -1;
    unsigned char *batch = (unsigned char *)PyByteArray_AS_STRING(out) + had;
    memcpy(batch, data + position, BATCH_HEADER);
    int64_t new_max = log_append_time ? -1 : latest_time(first_timestamp, survivors, count);
    Py_ssize_t at = BATCH_HEADER + write_survivors(batch + BATCH_HEADER, data, survivors, count,
                                                   log_append_time, shift);
    if (log_append_time)
        write_int64(batch + V2_FIRST_TIMESTAMP_AT, max_timestamp);
    else {
        write_int64(batch + V2_FIRST_TIMESTAMP_AT, wrapping_add(first_timestamp, shift));
        write_int64(batch + V2_MAX_TIMESTAMP_AT, new_max);
    }
    if (log_append_time)
        write_int64(batch + V2_MAX_TIMESTAMP_AT, max_timestamp);
    write_int32(batch + 8, (int32_t)(at - LOG_OVERHEAD));
    write_int32(batch + V2_COUNT_AT, count);
    write_int32(batch + V2_CRC_AT, (int32_t)crc32c(batch + V2_ATTRIBUTES_AT, at - V2_ATTRIBUTES_AT));
    return PyByteArray_Resize(out, had + at);
}

static PyObject *filter_plain(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t position, limit;
    PyObject *out, *remembered, *get;
    int retain_deletes;
    if (!PyArg_ParseTuple(args, "y*nnO!O!Op", &view, &position, &limit, &PyByteArray_Type, &out,
                          &PyDict_Type, &remembered, &get, &retain_deletes))
        return NULL;
    const unsigned char *data = view.buf;
    Py_ssize_t read = 0, kept = 0, end, key_length_at;
    int64_t offset;
    if (limit > view.len || position < 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "a position or limit outside the buffer");
        return NULL;
    }
    Py_ssize_t run_start = position, run_end = position;
    record_t *survivors = NULL;
    for (;;) {
        int32_t records;
        if (plain_batch(data, position, limit, &end, &offset, &records)) {
            PyMem_Free(survivors);
            survivors = PyMem_Malloc(sizeof(record_t) * (records ? records : 1));
            if (!survivors) {
                PyErr_NoMemory();
                goto error;
            }
            Py_ssize_t at = position + BATCH_HEADER;
            int32_t n, count = 0;
            record_t r;
            for (n = 0; n < records && next_record(data, &at, end, &r); n++) {
                if (r.key_length < 0 || (!retain_deletes && r.value_length < 0))
                    continue;
                int64_t latest = latest_offset_of(data, r.key_at, (Py_ssize_t)r.key_length,
                                                  remembered, get);
                if (latest == -2)
                    goto error;
                if (latest <= offset + r.offset_delta)
                    survivors[count++] = r;
            }
            if (n != records || at != end)
                break; /* a batch that does not read: Python reports it */
            if (count == 0 && records > 0 && read_int64(data + position + V2_PRODUCER_ID_AT) != -1)
                break; /* emptied, with a producer id: Python asks whether it stays */
            read += records;
            kept += count;
            if (count == records) {
                if (run_end != position) {
                    if (append_run(out, data, run_start, run_end) < 0)
                        goto error;
                    run_start = position;
                }
                run_end = end;
            } else {
                if (append_run(out, data, run_start, run_end) < 0)
                    goto error;
                if (count && append_rebuilt(out, data, position, end, survivors, count) < 0)
                    goto error;
                run_start = run_end = end;
            }
            position = end;
            continue;
        }
        if (!plain_entry(data, position, limit, &end, &offset, &key_length_at))
            break;
        int32_t key_length = read_int32(data + key_length_at);
        read++;
        if (key_length >= 0) { /* a compacted log keeps only keyed messages */
            const unsigned char *key_start = data + key_length_at + 4;
            PyObject *key = PyBytes_FromStringAndSize((const char *)key_start, key_length);
            if (!key)
                goto error;
            PyObject *latest = PyDict_GetItemWithError(remembered, key);
            if (latest)
                Py_INCREF(latest);
            else if (!PyErr_Occurred())
                latest = PyObject_CallOneArg(get, key);
            Py_DECREF(key);
            if (!latest)
                goto error;
            int64_t latest_offset = PyLong_AsLongLong(latest);
            Py_DECREF(latest);
            if (latest_offset == -1 && PyErr_Occurred())
                goto error;
            if (latest_offset <= offset &&
                (retain_deletes || read_int32(key_start + key_length) >= 0)) {
                kept++;
                if (run_end != position) {
                    if (append_run(out, data, run_start, run_end) < 0)
                        goto error;
                    run_start = position;
                }
                run_end = end;
            }
        }
        position = end;
    }
    if (append_run(out, data, run_start, run_end) < 0)
        goto error;
    PyMem_Free(survivors);
    PyBuffer_Release(&view);
    return Py_BuildValue("nnn", position, read, kept);
error:
    PyMem_Free(survivors);
    PyBuffer_Release(&view);
    return NULL;
}

/* -- inside compressed entries ------------------------------------------------------------- */

/* One v0/v1 message of a wrapper's inner message set. */
typedef struct {
    Py_ssize_t start, end; /* the entry, from its offset field to the end of its message */
    int64_t offset;        /* as stored: absolute (v0 wrapper) or relative (v1) */
    int magic;
    int32_t key_length;
    Py_ssize_t key_at; /* the key's first byte */
    int null_value;
} inner_t;

/* The inner message at *at (before limit), if it is a whole message of magic 0 or 1 whose key
 * and value length field lie inside it and, with `check_crc`, whose CRC matches; 0 otherwise. */
static int next_inner(const unsigned char *data, Py_ssize_t *at, Py_ssize_t limit, int check_crc,
                      inner_t *m)
{
    Py_ssize_t position = *at;
    if (limit - position < LOG_OVERHEAD)
        return 0;
    int32_t size = read_int32(data + position + 8);
    if (size < 14 || size > limit - position - LOG_OVERHEAD)
        return 0;
    Py_ssize_t start = position + LOG_OVERHEAD;
    signed char magic = (signed char)data[start + 4];
    if ((magic != 0 && magic != 1) || (magic == 1 && size < 22))
        return 0;
    if (check_crc && crc32(data + start + 4, size - 4) != (uint32_t)read_int32(data + start))
        return 0;
    m->start = position;
    m->end = start + size;
    m->offset = read_int64(data + position);
    m->magic = magic;
    Py_ssize_t key_length_at = start + (magic ? 14 : 6);
    m->key_length = read_int32(data + key_length_at);
    m->key_at = key_length_at + 4;
    m->null_value = 0;
    if (m->key_length >= 0) {
        if (m->key_length > m->end - m->key_at - 4)
            return 0;
        m->null_value = read_int32(data + m->key_at + m->key_length) < 0;
    }
    *at = m->end;
    return 1;
}

/* Every inner message of `inner`, checked as next_inner checks them (what is left after them
 * is shorter than an entry header): how many there are and the least, greatest and last stored
 * offset; 0 if one is not taken. */
static int walk_inner(const unsigned char *data, Py_ssize_t limit, int check_crc,
                      Py_ssize_t *count, int64_t *least, int64_t *greatest, int64_t *last)
{
    Py_ssize_t at = 0;
    inner_t m;
    *count = 0;
    *least = INT64_MAX;
    *greatest = INT64_MIN;
    while (limit - at >= LOG_OVERHEAD) {
        if (!next_inner(data, &at, limit, check_crc, &m))
            return 0;
        (*count)++;
        *least = m.offset < *least ? m.offset : *least;
        *greatest = m.offset > *greatest ? m.offset : *greatest;
        *last = m.offset;
    }
    return 1;
}

/* What to add to a stored inner offset for its absolute offset (a v1 wrapper's offset is its
 * last message's), if every absolute offset fits an int64; 0 otherwise. */
static int inner_base(int magic, int64_t wrapper_offset, int64_t least, int64_t greatest,
                      int64_t last, int64_t *base)
{
    int64_t ignored;
    *base = 0;
    if (magic == 0)
        return 1;
    return !__builtin_sub_overflow(wrapper_offset, last, base) &&
           !__builtin_add_overflow(*base, least, &ignored) &&
           !__builtin_add_overflow(*base, greatest, &ignored);
}

/* A key inside the data and, once looked up, its latest offset. */
typedef struct {
    Py_ssize_t at, length;
    int64_t latest;
} key_ref_t;

/* The latest offset of each of `n` keys: remembered[key], else, once remember(missing) was
 * called with every key remembered did not hold (the offset map looks them up in one pass),
 * remembered[key] again, else get(key); -1 on an error (raised). */
static int latest_offsets_of(const unsigned char *data, key_ref_t *keys, Py_ssize_t n,
                             PyObject *remembered, PyObject *get, PyObject *remember)
{
    PyObject *missing = NULL; /* the keys not remembered, in order */
    Py_ssize_t *missing_at = NULL; /* and which of `keys` each is */
    int result = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyBytes_FromStringAndSize((const char *)data + keys[i].at, keys[i].length);
        if (!key)
            goto done;
        PyObject *latest = PyDict_GetItemWithError(remembered, key);
        if (latest) {
            Py_DECREF(key);
            keys[i].latest = PyLong_AsLongLong(latest);
            if (keys[i].latest == -1 && PyErr_Occurred())
                goto done;
            continue;
        }
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            goto done;
        }
        if (!missing) {
            missing = PyList_New(0);
            missing_at = PyMem_Malloc(sizeof(Py_ssize_t) * n);
            if (!missing || !missing_at) {
                Py_DECREF(key);
                if (!missing_at)
                    PyErr_NoMemory();
                goto done;
            }
        }
        missing_at[PyList_GET_SIZE(missing)] = i;
        int failed = PyList_Append(missing, key) < 0;
        Py_DECREF(key);
        if (failed)
            goto done;
    }
    if (missing) {
        PyObject *called = PyObject_CallOneArg(remember, missing);
        if (!called)
            goto done;
        Py_DECREF(called);
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(missing); j++) {
            PyObject *key = PyList_GET_ITEM(missing, j);
            PyObject *latest = PyDict_GetItemWithError(remembered, key);
            if (latest)
                Py_INCREF(latest);
            else if (!PyErr_Occurred())
                latest = PyObject_CallOneArg(get, key);
            if (!latest)
                goto done;
            int64_t offset = PyLong_AsLongLong(latest);
            Py_DECREF(latest);
            if (offset == -1 && PyErr_Occurred())
                goto done;
            keys[missing_at[j]].latest = offset;
        }
    }
    result = 0;
done:
    Py_XDECREF(missing);
    PyMem_Free(missing_at);
    return result;
}

static PyObject *map_inner(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    int magic;
    long long wrapper_offset;
    PyObject *latest;
    if (!PyArg_ParseTuple(args, "y*iLO!", &view, &magic, &wrapper_offset, &PyDict_Type, &latest))
        return NULL;
    const unsigned char *data = view.buf;
    Py_ssize_t count, at = 0;
    int64_t least, greatest, last = 0, base;
    if (!walk_inner(data, view.len, 0, &count, &least, &greatest, &last) ||
        (count && !inner_base(magic, wrapper_offset, least, greatest, last, &base))) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    inner_t m;
    for (Py_ssize_t n = 0; n < count && next_inner(data, &at, view.len, 0, &m); n++) {
        if (m.key_length < 0)
            continue;
        if (put_key(latest, data + m.key_at, m.key_length, base + m.offset) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    if (!count)
        return Py_BuildValue("nLL", count, wrapper_offset, wrapper_offset);
    return Py_BuildValue("nLL", count, (long long)(base + least), (long long)(base + greatest));
}

static PyObject *filter_inner(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    int magic, retain_deletes;
    long long wrapper_offset;
    PyObject *remembered, *get, *remember, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*iLO!OOp", &view, &magic, &wrapper_offset, &PyDict_Type,
                          &remembered, &get, &remember, &retain_deletes))
        return NULL;
    const unsigned char *data = view.buf;
    Py_ssize_t count, candidates = 0, kept = 0, at = 0;
    int64_t least, greatest, last = 0, base;
    inner_t *survivors = NULL;
    key_ref_t *keys = NULL;
    if (!walk_inner(data, view.len, 1, &count, &least, &greatest, &last) ||
        (count && !inner_base(magic, wrapper_offset, least, greatest, last, &base)))
        goto not_taken;
    if (count == 0) {
        result = Py_BuildValue("nnOLL", count, kept, Py_None, (long long)-1, (long long)0);
        goto done;
    }
    survivors = PyMem_Malloc(sizeof(inner_t) * count);
    keys = PyMem_Malloc(sizeof(key_ref_t) * count);
    if (!survivors || !keys) {
        PyErr_NoMemory();
        goto done;
    }
    inner_t m;
    /* walk_inner checked every message's CRC: this second walk does not check them again */
    for (Py_ssize_t n = 0; n < count && next_inner(data, &at, view.len, 0, &m); n++) {
        if (m.key_length < 0 || (m.null_value && !retain_deletes))
            continue; /* a compacted log keeps only keyed messages */
        m.offset += base; /* absolute from here */
        keys[candidates].at = m.key_at;
        keys[candidates].length = m.key_length;
        survivors[candidates++] = m;
    }
    if (latest_offsets_of(data, keys, candidates, remembered, get, remember) < 0)
        goto done;
    for (Py_ssize_t i = 0; i < candidates; i++)
        if (keys[i].latest <= survivors[i].offset)
            survivors[kept++] = survivors[i];
    int64_t last_kept = kept ? survivors[kept - 1].offset : 0;
    if (kept == 0 || kept == count) {
        result = Py_BuildValue("nnOLL", count, kept, Py_None, (long long)-1, (long long)last_kept);
        goto done;
    }
    Py_ssize_t size = 0;
    int64_t max_timestamp = -1, stored, first_kept = survivors[0].offset;
    for (Py_ssize_t i = 0; i < kept; i++) {
        size += survivors[i].end - survivors[i].start;
        if (magic == 1 && __builtin_sub_overflow(survivors[i].offset, first_kept, &stored))
            goto not_taken;
    }
    PyObject *rebuilt = PyBytes_FromStringAndSize(NULL, size);
    if (!rebuilt)
        goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(rebuilt);
    for (Py_ssize_t i = 0; i < kept; i++) {
        const inner_t *s = &survivors[i];
        Py_ssize_t length = s->end - s->start;
        memcpy(out, data + s->start, length);
        write_int64(out, magic == 0 ? s->offset : s->offset - first_kept);
        if (s->magic == 1) {
            int64_t timestamp = read_int64(data + s->start + LOG_OVERHEAD + 6);
            max_timestamp = timestamp > max_timestamp ? timestamp : max_timestamp;
        }
        out += length;
    }
    result = Py_BuildValue("nnNLL", count, kept, rebuilt, (long long)max_timestamp,
                           (long long)last_kept);
    goto done;
not_taken:
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(survivors);
    PyMem_Free(keys);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *map_records(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    int count;
    long long base_offset;
    PyObject *latest;
    if (!PyArg_ParseTuple(args, "y*iLO!", &view, &count, &base_offset, &PyDict_Type, &latest))
        return NULL;
    const unsigned char *data = view.buf;
    Py_ssize_t at = 0;
    record_t r;
    int64_t offset;
    int taken = count >= 0 && count <= view.len;
    for (int n = 0; taken && n < count; n++)
        taken = next_record(data, &at, view.len, &r) &&
                !__builtin_add_overflow((int64_t)base_offset, r.offset_delta, &offset);
    if (!taken) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    at = 0;
    for (int n = 0; n < count && next_record(data, &at, view.len, &r); n++) {
        if (r.key_length < 0)
            continue;
        if (put_key(latest, data + r.key_at, (Py_ssize_t)r.key_length,
                    base_offset + r.offset_delta) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    PyBuffer_Release(&view);
    return PyLong_FromLong(count);
}

static PyObject *filter_records(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    int count, log_append_time, retain_deletes;
    long long base_offset;
    long long first_timestamp;
    PyObject *remembered, *get, *remember, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*iLLpO!OOp", &view, &count, &base_offset, &first_timestamp,
                          &log_append_time, &PyDict_Type, &remembered, &get, &remember,
                          &retain_deletes))
        return NULL;
    const unsigned char *data = view.buf;
    record_t *survivors = NULL, r;
    key_ref_t *keys = NULL;
    Py_ssize_t at = 0;
    int32_t kept = 0, candidates = 0;
    int64_t offset;
    /* a record takes seven bytes at least (its length and six fields of one byte each): a
     * damaged count goes to the Python walk before anything is allocated for it */
    if (count < 0 || count > view.len / 7)
        goto not_taken;
    survivors = PyMem_Malloc(sizeof(record_t) * (count ? count : 1));
    keys = PyMem_Malloc(sizeof(key_ref_t) * (count ? count : 1));
    if (!survivors || !keys) {
        PyErr_NoMemory();
        goto done;
    }
    for (int n = 0; n < count; n++) {
        if (!next_record(data, &at, view.len, &r) ||
            __builtin_add_overflow((int64_t)base_offset, r.offset_delta, &offset))
            goto not_taken;
        if (r.key_length < 0 || (!retain_deletes && r.value_length < 0))
            continue; /* a compacted log keeps only keyed messages */
        keys[candidates].at = r.key_at;
        keys[candidates].length = (Py_ssize_t)r.key_length;
        survivors[candidates++] = r;
    }
    if (latest_offsets_of(data, keys, candidates, remembered, get, remember) < 0)
        goto done;
    for (int32_t i = 0; i < candidates; i++)
        if (keys[i].latest <= base_offset + survivors[i].offset_delta)
            survivors[kept++] = survivors[i];
    if (kept == 0 || kept == count) {
        result = Py_BuildValue("iOLL", kept, Py_None, (long long)0, (long long)-1);
        goto done;
    }
    int64_t shift = log_append_time ? 0 : survivors[0].timestamp_delta;
    int64_t latest = latest_time(first_timestamp, survivors, kept);
    PyObject *records = PyBytes_FromStringAndSize(NULL, survivors_bound(survivors, kept));
    if (!records)
        goto done;
    Py_ssize_t written = write_survivors((unsigned char *)PyBytes_AS_STRING(records), data,
                                         survivors, kept, log_append_time, shift);
    if (_PyBytes_Resize(&records, written) < 0)
        goto done;
    result = Py_BuildValue("iNLL", kept, records, (long long)shift, (long long)latest);
    goto done;
not_taken:
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(survivors);
    PyMem_Free(keys);
    PyBuffer_Release(&view);
    return result;
}

/* The offset map's probe (tidelog/log/offset_map.py, OffsetMap.put_all): each digest goes to
 * the slot its first eight bytes name mod `slots`, or the next free one after it; a digest
 * already there takes the larger offset. Stops at the first new digest past `capacity`. */
static PyObject *put_digests(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t slots, capacity, size;
    PyObject *digests, *offsets;
    if (!PyArg_ParseTuple(args, "w*nnnO!O!", &view, &slots, &capacity, &size, &PyList_Type,
                          &digests, &PyList_Type, &offsets))
        return NULL;
    unsigned char *buffer = view.buf;
    Py_ssize_t count = PyList_GET_SIZE(digests), done = 0, probes = 0;
    if (slots <= 0 || slots > view.len / SLOT_SIZE || PyList_GET_SIZE(offsets) != count) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "put_digests: buffer, slots and lists do not agree");
        return NULL;
    }
    static const unsigned char empty[HASH_BYTES] = {0};
    for (; done < count; done++) {
        PyObject *digest = PyList_GET_ITEM(digests, done);
        if (!PyBytes_Check(digest) || PyBytes_GET_SIZE(digest) != HASH_BYTES) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "put_digests: a digest is not 16 bytes");
            return NULL;
        }
        const unsigned char *hash = (const unsigned char *)PyBytes_AS_STRING(digest);
        int64_t offset = PyLong_AsLongLong(PyList_GET_ITEM(offsets, done));
        if (offset == -1 && PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_ssize_t slot = (Py_ssize_t)((uint64_t)read_int64(hash) % (uint64_t)slots);
        for (Py_ssize_t probe = 0;; probe++) {
            if (probe == slots) /* every slot holds another digest */
                goto full;
            unsigned char *at = buffer + slot * SLOT_SIZE;
            if (memcmp(at, hash, HASH_BYTES) == 0) {
                if (read_int64(at + HASH_BYTES) < offset)
                    write_int64(at + HASH_BYTES, offset);
                break;
            }
            if (memcmp(at, empty, HASH_BYTES) == 0) {
                if (size >= capacity)
                    goto full;
                size++;
                memcpy(at, hash, HASH_BYTES);
                write_int64(at + HASH_BYTES, offset);
                break;
            }
            probes++;
            slot = slot + 1 < slots ? slot + 1 : 0;
        }
    }
full:
    PyBuffer_Release(&view);
    return Py_BuildValue("nnn", done, size, probes);
}

/* The offset map's look-up for each digest: its offset, or -1 where no slot holds it. */
static PyObject *get_digests(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view;
    Py_ssize_t slots;
    PyObject *digests;
    if (!PyArg_ParseTuple(args, "y*nO!", &view, &slots, &PyList_Type, &digests))
        return NULL;
    const unsigned char *buffer = view.buf;
    Py_ssize_t count = PyList_GET_SIZE(digests);
    static const unsigned char empty[HASH_BYTES] = {0};
    PyObject *offsets = NULL;
    if (slots <= 0 || slots > view.len / SLOT_SIZE) {
        PyErr_SetString(PyExc_ValueError, "get_digests: the buffer holds fewer slots");
        goto done;
    }
    offsets = PyList_New(count);
    if (!offsets)
        goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *digest = PyList_GET_ITEM(digests, i);
        if (!PyBytes_Check(digest) || PyBytes_GET_SIZE(digest) != HASH_BYTES) {
            PyErr_SetString(PyExc_ValueError, "get_digests: a digest is not 16 bytes");
            Py_CLEAR(offsets);
            goto done;
        }
        const unsigned char *hash = (const unsigned char *)PyBytes_AS_STRING(digest);
        int64_t offset = -1;
        Py_ssize_t slot = (Py_ssize_t)((uint64_t)read_int64(hash) % (uint64_t)slots);
        for (Py_ssize_t probe = 0; probe < slots; probe++) {
            const unsigned char *at = buffer + slot * SLOT_SIZE;
            if (memcmp(at, hash, HASH_BYTES) == 0) {
                offset = read_int64(at + HASH_BYTES);
                break;
            }
            if (memcmp(at, empty, HASH_BYTES) == 0)
                break;
            slot = slot + 1 < slots ? slot + 1 : 0;
        }
        PyObject *value = PyLong_FromLongLong(offset);
        if (!value) {
            Py_CLEAR(offsets);
            goto done;
        }
        PyList_SET_ITEM(offsets, i, value);
    }
done:
    PyBuffer_Release(&view);
    return offsets;
}

/* The offset map's marks of latest offsets (OffsetMap.mark_latest): for each occupied slot
 * whose offset o lies in [start, start + 8 * len(marks)), bit o - start of `marks` (bit 0 the
 * lowest of byte 0) is set. Returns how many slots it marked. */
static PyObject *mark_latest(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer view, marks;
    Py_ssize_t slots;
    long long start;
    if (!PyArg_ParseTuple(args, "y*nLw*", &view, &slots, &start, &marks))
        return NULL;
    const unsigned char *buffer = view.buf;
    unsigned char *bits = marks.buf;
    uint64_t span = (uint64_t)marks.len * 8;
    Py_ssize_t marked = 0;
    static const unsigned char empty[HASH_BYTES] = {0};
    if (slots < 0 || slots > view.len / SLOT_SIZE) {
        PyBuffer_Release(&view);
        PyBuffer_Release(&marks);
        PyErr_SetString(PyExc_ValueError, "mark_latest: the buffer holds fewer slots");
        return NULL;
    }
    for (Py_ssize_t slot = 0; slot < slots; slot++) {
        const unsigned char *at = buffer + slot * SLOT_SIZE;
        if (memcmp(at, empty, HASH_BYTES) == 0)
            continue;
        uint64_t bit = (uint64_t)read_int64(at + HASH_BYTES) - (uint64_t)start;
        if (bit < span) { /* an offset below start wraps past the span */
            bits[bit >> 3] |= (unsigned char)(1u << (bit & 7));
            marked++;
        }
    }
    PyBuffer_Release(&view);
    PyBuffer_Release(&marks);
    return PyLong_FromSsize_t(marked);
}

static PyMethodDef methods[] = {
    {"map_plain", map_plain, METH_VARARGS,
     "map_plain(data, position, limit, latest) -> (position, messages): puts each plain "
     "entry's key with its offset into `latest`, from `position` to the first entry it does "
     "not take."},
    {"filter_plain", filter_plain, METH_VARARGS,
     "filter_plain(data, position, limit, out, remembered, get, retain_deletes) -> (position, "
     "read, kept): appends the surviving plain entries to `out`, from `position` to the first "
     "entry it does not take; a key's latest offset is remembered[key], else get(key)."},
    {"map_inner", map_inner, METH_VARARGS,
     "map_inner(inner, magic, wrapper_offset, latest) -> (messages, least, greatest) or None: "
     "puts the key of each message of a wrapper's decompressed inner message set into `latest` "
     "with its absolute offset; the least and greatest of those offsets (the wrapper's offset "
     "twice when it holds none); None, having put nothing, if one message is not taken."},
    {"filter_inner", filter_inner, METH_VARARGS,
     "filter_inner(inner, magic, wrapper_offset, remembered, get, remember, retain_deletes) -> "
     "(read, kept, rebuilt, max_timestamp, last_kept_offset) or None: the surviving messages of "
     "a wrapper's inner message set, their stored offsets as the rewritten wrapper holds them "
     "(rebuilt None when none or all survive); None if one message is not taken. The keys "
     "remembered does not hold go to remember(keys) at once, then get(key) if still missing."},
    {"map_records", map_records, METH_VARARGS,
     "map_records(section, count, base_offset, latest) -> count or None: puts each keyed record "
     "of a v2 batch's decompressed records section into `latest` with its offset; None, having "
     "put nothing, if a record is not taken."},
    {"filter_records", filter_records, METH_VARARGS,
     "filter_records(section, count, base_offset, first_timestamp, log_append_time, "
     "remembered, get, remember, retain_deletes) -> (kept, records, shift, latest) or None: the "
     "surviving records written again (None when none or all survive), the first survivor's "
     "timestamp delta the times now count from, and the latest of the survivors' times (at "
     "least -1); None if a record is not taken. Keys are looked up as filter_inner looks them "
     "up; times and deltas wrap as Kafka's longs do."},
    {"put_digests", put_digests, METH_VARARGS,
     "put_digests(buffer, slots, capacity, size, digests, offsets) -> (put, size, probes): the "
     "offset map's probe for each digest in turn; put < len(digests) when the next new digest "
     "found the map full."},
    {"get_digests", get_digests, METH_VARARGS,
     "get_digests(buffer, slots, digests) -> offsets: the offset map's offset for each digest, "
     "-1 for one it does not hold."},
    {"mark_latest", mark_latest, METH_VARARGS,
     "mark_latest(buffer, slots, start, marks) -> marked: sets bit o - start of the bytearray "
     "`marks` for each offset o the offset map holds within the bits' span."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_entry_walk",
    .m_doc = "The log cleaner's loops over uncompressed entries (tidelog/log/compaction.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__entry_walk(void)
{
    crc32c_init();
    crc32_init();
    return PyModule_Create(&module);
}
