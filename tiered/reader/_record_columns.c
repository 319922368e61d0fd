/* Records of RecordBatch v2 straight into Arrow column buffers: the native decoder of
 * tiercel.tiered.reader.record_columns, which holds its Python twin and the Arrow assembly.
 *
 * Columns.append_records walks a decompressed records section (Kafka's
 * DefaultRecord.readFrom framing: varint length, attributes, varlong timestamp delta,
 * varint offset delta, varint-prefixed key and value, varint header count, headers)
 * and appends each record within the [first, last] offset clip to growable C buffers:
 * offsets and timestamps (int64), timestamp types (int32), keys and values as Arrow
 * binary columns (int32 offsets, data, validity bitmap), and headers when asked (a list
 * per row, null when the record has none, as Spark's KafkaRecordToRowConverter makes it).
 * Every record is checked as readFrom checks it, those outside the clip too: its fields
 * must end exactly where its length says.
 * Columns.take hands the buffers over as read-only buffer objects that pyarrow wraps
 * without copying (pa.py_buffer), so no Python object is made per record.
 *
 * One Arrow batch holds about `batch_bytes`: keys, values, headers and the offsets,
 * timestamps and lengths beside them. The walk stops after the record that reaches it,
 * and before a record that could take a column past Arrow's int32 offsets, and says
 * where, so that the caller takes the batch and resumes there.
 *
 * Every read is bounds-checked at the same points as the Python loop, and broken
 * framing raises tiercel.protocol.errors.InvalidRecordError as it does: the tests run
 * both over the same valid and corrupted inputs and compare.
 *
 * The walk runs without the GIL (it touches no Python object), so reader threads decode
 * in parallel; one Columns per thread: a concurrent second call raises RuntimeError.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *InvalidRecordError; /* tiercel.protocol.errors.InvalidRecordError */

/* --- growable buffers ---------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

/* 0, or -1 when out of memory (no Python error set: the GIL may be released). */
static int
buf_reserve(Buf *b, Py_ssize_t extra)
{
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2)
            return -1;
        cap *= 2;
    }
    char *data = realloc(b->data, (size_t)cap);
    if (data == NULL)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int
buf_put(Buf *b, const void *src, Py_ssize_t n)
{
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int
buf_put_i64(Buf *b, int64_t v)
{
    return buf_put(b, &v, sizeof v);
}

static inline int
buf_put_i32(Buf *b, int32_t v)
{
    return buf_put(b, &v, sizeof v);
}

/* An Arrow binary column: int32 offsets (starting at 0), data, LSB-first validity
 * bitmap, null count. */
typedef struct {
    Buf offsets;
    Buf data;
    Buf validity;
    Py_ssize_t rows;
    Py_ssize_t nulls;
} Binary;

static int
binary_init(Binary *c)
{
    memset(c, 0, sizeof *c);
    return buf_put_i32(&c->offsets, 0);
}

static void
binary_free(Binary *c)
{
    free(c->offsets.data);
    free(c->data.data);
    free(c->validity.data);
    memset(c, 0, sizeof *c);
}

/* Bit `row` of an LSB-first validity bitmap, set when `valid`; 0, or -1 out of memory. */
static inline int
bitmap_append(Buf *bits, Py_ssize_t row, int valid)
{
    if ((row & 7) == 0) {
        if (buf_reserve(bits, 1) < 0)
            return -1;
        bits->data[bits->len++] = 0;
    }
    if (valid)
        bits->data[row >> 3] |= (char)(1 << (row & 7));
    return 0;
}

/* Appends `size` bytes at `src`, or a null when size is -1. 0, or -1 out of memory. The
 * data stays within Arrow's int32 offsets: append_section starts a new batch before a
 * record whose bytes could pass them. */
static inline int
binary_append(Binary *c, const char *src, int32_t size)
{
    if (bitmap_append(&c->validity, c->rows, size >= 0) < 0)
        return -1;
    if (size < 0) {
        c->nulls++;
        size = 0;
    }
    if (size && buf_put(&c->data, src, size) < 0)
        return -1;
    c->rows++;
    return buf_put_i32(&c->offsets, (int32_t)c->data.len);
}

/* --- the buffer object handed to pyarrow ----------------------------------------------- */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
} Buffer;

static void
buffer_dealloc(Buffer *self)
{
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
buffer_getbuffer(Buffer *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : "", self->len,
                             1, flags);
}

static Py_ssize_t
buffer_length(Buffer *self)
{
    return self->len;
}

static PyBufferProcs buffer_as_buffer = {(getbufferproc)buffer_getbuffer, NULL};
static PySequenceMethods buffer_as_sequence = {.sq_length = (lenfunc)buffer_length};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tiercel.tiered.reader._record_columns.Buffer",
    .tp_doc = "Read-only bytes of one column buffer, owned by this object.",
    .tp_basicsize = sizeof(Buffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_as_buffer = &buffer_as_buffer,
    .tp_as_sequence = &buffer_as_sequence,
};

/* A Buffer taking over `b`'s memory; `b` is left empty. */
static PyObject *
buffer_take(Buf *b)
{
    Buffer *out = PyObject_New(Buffer, &BufferType);
    if (out == NULL)
        return NULL;
    out->data = b->data;
    out->len = b->len;
    memset(b, 0, sizeof *b);
    return (PyObject *)out;
}

/* (offsets, data, validity or None when no nulls, null count) */
static PyObject *
binary_take(Binary *c)
{
    PyObject *validity = c->nulls ? buffer_take(&c->validity) : Py_NewRef(Py_None);
    PyObject *out = Py_BuildValue("(NNNn)", buffer_take(&c->offsets), buffer_take(&c->data),
                                  validity, c->nulls);
    binary_free(c);
    if (binary_init(c) < 0 && out) {
        Py_DECREF(out);
        return PyErr_NoMemory();
    }
    return out;
}

/* --- the columns ------------------------------------------------------------------------ */

/* What a batch holds besides key, value and header bytes, counted into its size so that
 * records of null or empty keys and values bound it too: per row its int64 offset and
 * timestamp, int32 timestamp type and the int32 offsets of its key and value (and of its
 * header list, with headers); per header the int32 offsets of its key and value. */
#define ROW_BYTES 28
#define HEADER_LIST_BYTES 4
#define HEADER_BYTES 8

typedef struct {
    PyObject_HEAD
    int include_headers;
    int busy;
    Py_ssize_t rows;
    long long batch_bytes; /* the Arrow bytes appended, as the Python class counts them */
    Buf offsets;           /* int64 */
    Buf timestamps;        /* int64 */
    Buf timestamp_types;   /* int32 */
    Binary keys;
    Binary values;
    Buf header_offsets;    /* int32, rows + 1 entries */
    Buf header_validity;   /* a row's header list is null when the record has none */
    Py_ssize_t header_nulls;
    Binary header_keys;    /* never null */
    Binary header_values;
} Columns;

static int
columns_reset(Columns *self)
{
    self->rows = 0;
    self->batch_bytes = 0;
    self->header_nulls = 0;
    if (binary_init(&self->keys) < 0 || binary_init(&self->values) < 0 ||
        binary_init(&self->header_keys) < 0 || binary_init(&self->header_values) < 0 ||
        buf_put_i32(&self->header_offsets, 0) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void
columns_free(Columns *self)
{
    free(self->offsets.data);
    free(self->timestamps.data);
    free(self->timestamp_types.data);
    free(self->header_offsets.data);
    free(self->header_validity.data);
    memset(&self->offsets, 0, sizeof self->offsets);
    memset(&self->timestamps, 0, sizeof self->timestamps);
    memset(&self->timestamp_types, 0, sizeof self->timestamp_types);
    memset(&self->header_offsets, 0, sizeof self->header_offsets);
    memset(&self->header_validity, 0, sizeof self->header_validity);
    binary_free(&self->keys);
    binary_free(&self->values);
    binary_free(&self->header_keys);
    binary_free(&self->header_values);
}

static int
columns_init(Columns *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"include_headers", NULL};
    int include_headers;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "p", kwlist, &include_headers))
        return -1;
    columns_free(self);
    self->include_headers = include_headers;
    self->busy = 0;
    return columns_reset(self);
}

static void
columns_dealloc(Columns *self)
{
    columns_free(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The unsigned varint at *p, below end, of at most `max_bytes` bytes (5 for a varint,
 * 10 for a varlong, as protocol.records reads them); 0, or an error message. */
static inline const char *
read_unsigned(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *p, int max_bytes,
              uint64_t *out)
{
    uint64_t raw = 0;
    for (int shift = 0;; shift += 7) {
        if (*p >= end)
            return "records section ends inside a record";
        unsigned char b = buf[(*p)++];
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80)
            break;
        if (shift + 7 >= 7 * max_bytes)
            return max_bytes == 5 ? "Found invalid record structure: varint is too long"
                                  : "Found invalid record structure: varlong is too long";
    }
    *out = raw;
    return NULL;
}

/* Zigzag varint (32 bits) and varlong (64 bits), as decode_varint / decode_varlong. */
static inline const char *
read_varint(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *p, int32_t *out)
{
    uint64_t raw = 0;
    const char *msg = read_unsigned(buf, end, p, 5, &raw);
    uint32_t u = (uint32_t)raw;
    *out = (int32_t)((u >> 1) ^ (0u - (u & 1)));
    return msg;
}

static inline const char *
read_varlong(const unsigned char *buf, Py_ssize_t end, Py_ssize_t *p, int64_t *out)
{
    uint64_t raw = 0;
    const char *msg = read_unsigned(buf, end, p, 10, &raw);
    *out = (int64_t)((raw >> 1) ^ (0u - (raw & 1)));
    return msg;
}

#define ERR(...) do { snprintf(err, sizeof err, __VA_ARGS__); goto fail; } while (0)
#define VARINT(v) do { if ((msg = read_varint(buf, end, &p, &(v)))) ERR("%s", msg); } while (0)
#define OOM() do { oom = 1; goto fail; } while (0)

/* The headers of one record at p, which end at or before record_end: checked, and with
 * `append` added to the row just appended (its list null when there are none) and
 * counted into the batch's bytes. The new position, or -1 with err set. Varints are read up to the section's end and their
 * values checked against the record's, as the Python loop does. */
static Py_ssize_t
walk_headers(Columns *self, const unsigned char *buf, Py_ssize_t end, Py_ssize_t p,
             Py_ssize_t record_end, int append, char *err_out, size_t err_size, int *oom_out)
{
    char err[160];
    const char *msg;
    int oom = 0;
    int32_t count, size;
    long long bytes = 0;
    VARINT(count);
    if (count < 0 || count > record_end - p)
        ERR("invalid header count %d", count);
    for (int32_t i = 0; i < count; i++) {
        VARINT(size);
        if (size < 0 || p + size > record_end)
            ERR("invalid header key size %d", size);
        if (append && binary_append(&self->header_keys, (const char *)buf + p, size) < 0)
            OOM();
        p += size;
        bytes += size;
        VARINT(size);
        if (size < -1 || p + size > record_end)
            ERR("invalid header value size %d", size);
        if (append && binary_append(&self->header_values, (const char *)buf + p, size) < 0)
            OOM();
        if (size > 0) {
            p += size;
            bytes += size;
        }
    }
    if (append) {
        if (buf_put_i32(&self->header_offsets, (int32_t)self->header_keys.rows) < 0 ||
            bitmap_append(&self->header_validity, self->rows - 1, count > 0) < 0)
            OOM();
        self->header_nulls += count == 0;
        self->batch_bytes += HEADER_LIST_BYTES + (long long)count * HEADER_BYTES + bytes;
    }
    return p;
fail:
    if (oom)
        *oom_out = 1;
    else
        snprintf(err_out, err_size, "%s", err);
    return -1;
}

typedef struct {
    const unsigned char *buf;
    Py_ssize_t start, end;
    long long count;
    int64_t base_offset, base_timestamp, first_offset, last_offset;
    int log_append;
    int64_t log_append_time;
    long long batch_bytes;
} Section;

/* Walks `s->count` records of one section from s->start, until the batch holds
 * s->batch_bytes; 0 with *stopped (where the walk stopped) and *left (records not
 * walked), or -1 with err (or *oom) set. No Python calls. */
static int
append_section(Columns *self, const Section *s, Py_ssize_t *stopped, long long *left,
               char *err_out, size_t err_size, int *oom_out)
{
    char err[160];
    const char *msg;
    int oom = 0;
    const unsigned char *buf = s->buf;
    Py_ssize_t end = s->end, p = s->start;
    int32_t type = s->log_append ? 1 : 0; /* Kafka's TimestampType ids */
    long long remaining = s->count > 0 ? s->count : 0;
    while (remaining > 0) {
        int32_t length, offset_delta, size;
        int64_t timestamp_delta, offset, timestamp;
        Py_ssize_t record_start = p;
        VARINT(length);
        Py_ssize_t record_end = p + length;
        if (length <= 0 || record_end > end)
            ERR("invalid record size %d at %zd", length, p);
        p += 1; /* attributes: unused by Kafka */
        if ((msg = read_varlong(buf, end, &p, &timestamp_delta)) != NULL)
            ERR("%s", msg);
        VARINT(offset_delta);
        int wanted = !__builtin_add_overflow(s->base_offset, (int64_t)offset_delta, &offset) &&
                     offset >= s->first_offset && offset <= s->last_offset;
        if (wanted) {
            /* Its key, value and header bytes are fewer than its length: in an empty
             * batch they always fit. */
            if (self->rows > 0 && self->batch_bytes + length > INT32_MAX) {
                p = record_start;
                break;
            }
            if (s->log_append)
                timestamp = s->log_append_time;
            else if (__builtin_add_overflow(s->base_timestamp, timestamp_delta, &timestamp))
                ERR("record timestamp out of range at %zd", p);
            if (buf_put_i64(&self->offsets, offset) < 0 ||
                buf_put_i64(&self->timestamps, timestamp) < 0 ||
                buf_put_i32(&self->timestamp_types, type) < 0)
                OOM();
            self->rows++;
            self->batch_bytes += ROW_BYTES;
        }
        for (int field = 0; field < 2; field++) { /* the key, then the value */
            VARINT(size);
            if (size < -1)
                ERR("invalid %s size %d at %zd", field ? "value" : "key", size, p);
            if (size > record_end - p)
                ERR("key or value past the record's end at %zd", p + size);
            if (wanted) {
                Binary *column = field ? &self->values : &self->keys;
                if (binary_append(column, (const char *)buf + p, size) < 0)
                    OOM();
            }
            if (size > 0) {
                p += size;
                if (wanted)
                    self->batch_bytes += size;
            }
        }
        int hoom = 0;
        p = walk_headers(self, buf, end, p, record_end, wanted && self->include_headers, err,
                         sizeof err, &hoom);
        if (p < 0) {
            if (hoom)
                OOM();
            goto fail;
        }
        if (p != record_end)
            /* Kafka's DefaultRecord.readFrom: the fields must fill the record exactly. */
            ERR("invalid record size: expected to read %d bytes in record payload, but "
                "instead read %zd",
                length, p - (record_end - length));
        remaining--;
        if (wanted && self->batch_bytes >= s->batch_bytes)
            break;
    }
    if (remaining == 0 && p != end)
        ERR("%zd bytes after the last of the batch's records", end - p);
    *stopped = p;
    *left = remaining;
    return 0;
fail:
    if (oom)
        *oom_out = 1;
    else
        snprintf(err_out, err_size, "%s", err);
    return -1;
}

static PyObject *
columns_append_records(Columns *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "append_records(records, count, base_offset, base_timestamp, "
                        "log_append_time, first_offset, last_offset, start, batch_bytes)");
        return NULL;
    }
    Section s;
    s.count = PyLong_AsLongLong(args[1]);
    s.base_offset = PyLong_AsLongLong(args[2]);
    s.base_timestamp = PyLong_AsLongLong(args[3]);
    s.log_append = args[4] != Py_None;
    s.log_append_time = s.log_append ? PyLong_AsLongLong(args[4]) : 0;
    s.first_offset = PyLong_AsLongLong(args[5]);
    s.last_offset = PyLong_AsLongLong(args[6]);
    s.start = PyLong_AsSsize_t(args[7]);
    s.batch_bytes = PyLong_AsLongLong(args[8]);
    if (PyErr_Occurred())
        return NULL;
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Columns used by two threads at once");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (s.start < 0 || s.start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start is outside the records");
        return NULL;
    }
    s.buf = view.buf;
    s.end = view.len;
    char err[192] = "";
    int oom = 0, rc;
    Py_ssize_t stopped = 0;
    long long left = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = append_section(self, &s, &stopped, &left, err, sizeof err, &oom);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyBuffer_Release(&view);
    if (rc == 0)
        return Py_BuildValue("(nL)", stopped, left);
    if (oom)
        return PyErr_NoMemory();
    PyErr_SetString(InvalidRecordError, err);
    return NULL;
}

static PyObject *
columns_take(Columns *self, PyObject *Py_UNUSED(ignored))
{
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Columns used by two threads at once");
        return NULL;
    }
    /* "N" hands over the new references; on a NULL, Py_BuildValue fails and drops
     * the others. */
    PyObject *headers = Py_NewRef(Py_None);
    if (self->include_headers) {
        PyObject *validity = self->header_nulls ? buffer_take(&self->header_validity)
                                                : Py_NewRef(Py_None);
        Py_SETREF(headers, Py_BuildValue("(NNnNN)", buffer_take(&self->header_offsets),
                                         validity, self->header_nulls,
                                         binary_take(&self->header_keys),
                                         binary_take(&self->header_values)));
    }
    PyObject *out = Py_BuildValue("(nNNNNNN)", self->rows, buffer_take(&self->offsets),
                                  buffer_take(&self->timestamps),
                                  buffer_take(&self->timestamp_types), binary_take(&self->keys),
                                  binary_take(&self->values), headers);
    columns_free(self);
    if (columns_reset(self) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

static Py_ssize_t
columns_length(Columns *self)
{
    return self->rows;
}

static PyObject *
columns_get_batch_bytes(Columns *self, void *Py_UNUSED(closure))
{
    return PyLong_FromLongLong(self->batch_bytes);
}

static PyObject *
columns_get_include_headers(Columns *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->include_headers);
}

static PyMethodDef columns_methods[] = {
    {"append_records", (PyCFunction)(void (*)(void))columns_append_records, METH_FASTCALL,
     "Append the records of an uncompressed records section within the offset clip, "
     "until the batch holds batch_bytes; (where it stopped, records left)."},
    {"take", (PyCFunction)columns_take, METH_NOARGS,
     "The column buffers appended so far; the columns start empty again."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef columns_getset[] = {
    {"batch_bytes", (getter)columns_get_batch_bytes, NULL,
     "Arrow bytes appended: keys, values, headers, offsets.", NULL},
    {"include_headers", (getter)columns_get_include_headers, NULL, "Headers decoded.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods columns_as_sequence = {.sq_length = (lenfunc)columns_length};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tiercel.tiered.reader._record_columns.Columns",
    .tp_doc = "Column buffers of the records appended so far, for one partition.",
    .tp_basicsize = sizeof(Columns),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)columns_init,
    .tp_dealloc = (destructor)columns_dealloc,
    .tp_methods = columns_methods,
    .tp_getset = columns_getset,
    .tp_as_sequence = &columns_as_sequence,
};

static int
module_exec(PyObject *module)
{
    PyObject *errors = PyImport_ImportModule("tiercel.protocol.errors");
    if (errors == NULL)
        return -1;
    InvalidRecordError = PyObject_GetAttrString(errors, "InvalidRecordError");
    Py_DECREF(errors);
    if (InvalidRecordError == NULL)
        return -1;
    if (PyType_Ready(&BufferType) < 0 || PyType_Ready(&ColumnsType) < 0)
        return -1;
    if (PyModule_AddObjectRef(module, "Columns", (PyObject *)&ColumnsType) < 0 ||
        PyModule_AddObjectRef(module, "Buffer", (PyObject *)&BufferType) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tiercel.tiered.reader._record_columns",
    .m_doc = "Native record framing decoder for tiercel.tiered.reader.record_columns.",
    .m_size = 0,
    .m_slots = module_slots,
};

PyMODINIT_FUNC
PyInit__record_columns(void)
{
    return PyModuleDef_Init(&module_def);
}
