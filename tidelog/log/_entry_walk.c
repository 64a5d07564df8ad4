/* The log cleaner's two loops over uncompressed entries and its offset map's probe, in C
 * (tidelog/log/compaction.py and offset_map.py hold the same loops in Python, the reference;
 * tests/log/test_cleaner_equivalence.py checks that both write the same bytes).
 *
 * Each function walks entries from `position` while they are plain messages it can take as
 * they are: whole before `limit`, of magic 0 or 1, uncompressed, at least as large as their
 * magic's fixed fields, with key (and value length) inside the entry. It stops at the first
 * entry that is anything else (a compressed wrapper, a partial or corrupt entry) and returns
 * where it stopped: the Python loop handles that entry, then calls again.
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
    while (plain_entry(data, position, limit, &end, &offset, &key_length_at)) {
        int32_t key_length = read_int32(data + key_length_at);
        count++;
        if (key_length >= 0) {
            PyObject *key =
                PyBytes_FromStringAndSize((const char *)data + key_length_at + 4, key_length);
            PyObject *value = key ? PyLong_FromLongLong(offset) : NULL;
            int failed = !value || PyDict_SetItem(latest, key, value) < 0;
            Py_XDECREF(key);
            Py_XDECREF(value);
            if (failed) {
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
    while (plain_entry(data, position, limit, &end, &offset, &key_length_at)) {
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
    PyBuffer_Release(&view);
    return Py_BuildValue("nnn", position, read, kept);
error:
    PyBuffer_Release(&view);
    return NULL;
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

static PyMethodDef methods[] = {
    {"map_plain", map_plain, METH_VARARGS,
     "map_plain(data, position, limit, latest) -> (position, messages): puts each plain "
     "entry's key with its offset into `latest`, from `position` to the first entry it does "
     "not take."},
    {"filter_plain", filter_plain, METH_VARARGS,
     "filter_plain(data, position, limit, out, remembered, get, retain_deletes) -> (position, "
     "read, kept): appends the surviving plain entries to `out`, from `position` to the first "
     "entry it does not take; a key's latest offset is remembered[key], else get(key)."},
    {"put_digests", put_digests, METH_VARARGS,
     "put_digests(buffer, slots, capacity, size, digests, offsets) -> (put, size, probes): the "
     "offset map's probe for each digest in turn; put < len(digests) when the next new digest "
     "found the map full."},
    {"get_digests", get_digests, METH_VARARGS,
     "get_digests(buffer, slots, digests) -> offsets: the offset map's offset for each digest, "
     "-1 for one it does not hold."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_entry_walk",
    .m_doc = "The log cleaner's loops over uncompressed entries (tidelog/log/compaction.py).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__entry_walk(void) { return PyModule_Create(&module); }
