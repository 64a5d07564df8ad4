/* The walk a leader makes over an uncompressed v2 records section before appending it, in C
 * (tidelog/records/record_batch.py's check_records_python is the same walk in Python, the
 * reference; tests/records/test_record_batch.py checks that both give the same answer, faults
 * included).
 *
 * check_records(data, count, keys_required) -> (low, high, index_of_high) | str
 *
 * Each of `count` records must fill its length exactly, carry its index as offset delta, have
 * key, value and headers inside it (a null key refused with keys_required, a null header key
 * always), and the records must fill `data`. The answer is the smallest and largest timestamp
 * delta and the index of the first record with the largest, or a string naming the first
 * fault (the caller raises CORRUPT_MESSAGE with it).
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

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS,
     "check_records(data, count, keys_required) -> (low, high, index_of_high) or a string "
     "naming the first fault of an uncompressed v2 records section."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_record_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__record_walk(void) { return PyModule_Create(&module); }
