/* exepy's launcher: the native part of a standalone app built by `exepy build`.
 *
 * It finds the official CPython DLL the app was built with, starts CPython with an
 * isolated configuration (PyConfig: no PYTHONPATH, no user site, no registry, no site
 * import, UTF-8 mode) whose sys.path is
 *   [<this exe's appended zip: the standard library and embeddedimport>, <the DLL folder>]
 * and hands over to embeddedimport, which runs the app bundled in this exe's resources
 * (RT_RCDATA 200 and 201, the original exepy format).
 *
 * Resources written by exepy:
 *   RT_RCDATA 200, 201  the app's bundle and command line, handed to Python as bytes.
 *   RT_RCDATA 202  UTF-16LE, NUL-separated: DLL name ("python313.dll"), mode ("onedir" or
 *                  "onefile"), cache key (onefile: the runtime payload's hash), and an
 *                  optional fourth field "interpreter": the exe is a portable python.exe
 *                  (see below) instead of an app.
 *   RT_RCDATA 203  onefile only: the runtime's binaries (DLLs and .pyd), raw deflate each:
 *                  "EXEPYRT1", uint32 count, then per file: uint16 name length (UTF-16
 *                  units), the name, uint32 size, uint32 packed size, packed bytes.
 *   RT_RCDATA 204  the start-up table: marshal of {module name: (path, code object)} for
 *                  embeddedimport's start-up modules and the few standard ones they need,
 *                  compiled by the runtime's own CPython (absent when it could not run).
 *   RT_RCDATA 205  onefile only, when the app has them: the files that must be on disk
 *                  (binary wheels' packages, packages that open data through __file__):
 *                  "EXEPYPK1", 16 ASCII hex digits (their hash), then a payload as in 203
 *                  but with magic "EXEPYRT2", whose names may hold subfolders ("a\\b.pyd").
 *
 * onedir: the DLL is next to the exe. onefile: the binaries are unpacked once into
 * %LOCALAPPDATA%\exepy\runtimes\<key> (a temporary folder renamed into place, so two first
 * runs at once are safe and a half-written folder is never used); later runs find the
 * folder and unpack nothing. Python code and data are never written to disk, except the
 * packages of resource 205: they are unpacked once into <runtime folder>\\packages-<hash>
 * (the same temporary-folder-and-rename), which goes on sys.path after the runtime's
 * folder; a stamp file written last is the only thing a later start checks (one file
 * read, however many files the packages have).
 *
 * The few standard modules CPython imports before any code runs (encodings and the codecs
 * of UTF-8 and the ANSI code page, linecache) are served frozen from the appended zip's
 * .pyc files (freeze_startup_modules): a start that imports nothing else never has
 * zipimport parse the zip's directory.
 *
 * An interpreter exe parses its command line as python.exe does (CPython's own parser and
 * Py_RunMain: scripts, -c, -m, -i, -, the REPL, exit codes) with the bundle (200) importable,
 * isolated by default as the original single-binary python.exe was: the environment
 * (PYTHON*), the user site and the registry are ignored and no .pyc is written. The -X
 * options use_environment, user_site and write_bytecode opt back in (CPython keeps them in
 * sys._xoptions, and multiprocessing passes them on to its children).
 *
 * PyConfig is not a stable ABI: the three field offsets we write are per minor version
 * (Win64 layout of Include/cpython/initconfig.h), and the argv offset is checked at run
 * time against what PyConfig_SetArgv wrote, so a layout we do not know fails loudly.
 *
 * Build: python packages/exepy/launcher/build.py (mingw-w64).
 */
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <wchar.h>

#define CONFIG_ID 202
#define RUNTIME_ID 203
#define BUNDLE_ID 200
#define COMMAND_ID 201
#define BOOT_ID 204
#define PACKAGES_ID 205

typedef struct {
    int type;
    const char *func;
    const char *err_msg;
    int exitcode;
} PyStatus;

typedef struct {
    intptr_t length;
    wchar_t **items;
} PyWideStringList;

typedef void (*InitPreConfigFn)(void *);
typedef PyStatus (*PreInitializeFn)(const void *);
typedef void (*InitConfigFn)(void *);
typedef PyStatus (*SetArgvFn)(void *, intptr_t, wchar_t *const *);
typedef PyStatus (*ListAppendFn)(PyWideStringList *, const wchar_t *);
typedef PyStatus (*InitializeFromConfigFn)(const void *);
typedef void (*ConfigClearFn)(void *);
typedef int (*StatusExceptionFn)(PyStatus);
typedef void (*ExitStatusExceptionFn)(PyStatus);
typedef int (*RunStringFn)(const char *, void *);
typedef PyStatus (*PreInitializeFromArgsFn)(const void *, intptr_t, wchar_t **);
typedef int (*RunMainFn)(void);
typedef int (*FinalizeFn)(void);
typedef void *(*BytesFromFn)(const char *, intptr_t);
typedef int (*SysSetFn)(const char *, void *);
typedef void (*DecRefFn)(void *);
typedef PyStatus (*SetStringFn)(void *, wchar_t **, const wchar_t *);

/* PyPreConfig (unchanged from 3.8 to 3.13 on Windows): utf8_mode follows _config_init,
 * parse_argv, isolated, use_environment, configure_locale, coerce_c_locale,
 * coerce_c_locale_warn and legacy_windows_fs_encoding. */
#define PRECONFIG_USE_ENVIRONMENT 12
#define PRECONFIG_UTF8_MODE 32
/* PyConfig offsets shared by 3.11-3.13 (Win64). */
#define CONFIG_INSTALL_SIGNAL_HANDLERS 16
#define CONFIG_ARGV 120
#define CONFIG_SITE_IMPORT 168
/* More of them, for the interpreter (checked at run time against the two default configs,
 * python and isolated, whose values differ). */
#define CONFIG_ISOLATED 4
#define CONFIG_USE_ENVIRONMENT 8
#define CONFIG_PARSE_ARGV 96
#define CONFIG_WRITE_BYTECODE 196
#define CONFIG_USER_SITE_DIRECTORY 208
#define CONFIG_SAFE_PATH 260

/* Hands over to embeddedimport._startup.standalone() with the resources the launcher found
 * (sys._exepy_boot: 204, sys._exepy_bundle: 200, sys._exepy_command: 201; each only if
 * present). With the start-up table (204), _startup's own code comes from it: no file is
 * opened to start the app. Without it (built where the runtime could not compile
 * embeddedimport), _startup is imported from the sources in the exe's zip. */
static const char BOOTSTRAP[] =
    "import sys\n"
    "boot = sys.__dict__.pop('_exepy_boot', None)\n"
    "if boot is None:\n"
    "    import embeddedimport._startup as startup\n"
    "else:\n"
    "    import marshal\n"
    "    boot = marshal.loads(boot)\n"
    "    startup = type(sys)('embeddedimport._startup')\n"
    "    startup.__package__ = 'embeddedimport'\n"
    "    exec(boot['embeddedimport._startup'][1], startup.__dict__)\n"
    "startup.standalone(boot, sys.__dict__.pop('_exepy_bundle', None),\n"
    "                   sys.__dict__.pop('_exepy_command', None))\n";

/* The interpreter's start-up: the same hand-over, run in a namespace of its own so that
 * __main__ (the REPL's, -c's) stays clean; no app runs, Py_RunMain does the rest. */
static const char BOOTSTRAP_INTERPRETER[] =
    "exec(\"import sys\\n"
    "boot = sys.__dict__.pop('_exepy_boot', None)\\n"
    "if boot is None:\\n"
    "    import embeddedimport._startup as startup\\n"
    "else:\\n"
    "    import marshal\\n"
    "    boot = marshal.loads(boot)\\n"
    "    startup = type(sys)('embeddedimport._startup')\\n"
    "    startup.__package__ = 'embeddedimport'\\n"
    "    exec(boot['embeddedimport._startup'][1], startup.__dict__)\\n"
    "startup.interpreter(boot, sys.__dict__.pop('_exepy_bundle', None))\\n\", {})\n";

static wchar_t exe_path[MAX_PATH * 2];
static int windowed;

static void show_error(const wchar_t *message)
{
    HANDLE err = GetStdHandle(STD_ERROR_HANDLE);
    wchar_t text[2048];
    const wchar_t *name = wcsrchr(exe_path, L'\\');
    name = name ? name + 1 : exe_path;
    _snwprintf(text, sizeof text / sizeof *text, L"%ls: error: %ls\n", name, message);
    if (!windowed && err != NULL && err != INVALID_HANDLE_VALUE) {
        char utf8[4096];
        int n = WideCharToMultiByte(CP_UTF8, 0, text, -1, utf8, sizeof utf8, NULL, NULL);
        DWORD written;
        if (n > 1)
            WriteFile(err, utf8, (DWORD)(n - 1), &written, NULL);
        return;
    }
    HMODULE user32 = LoadLibraryW(L"user32.dll");
    if (user32 != NULL) {
        typedef int(WINAPI * MessageBoxFn)(HWND, LPCWSTR, LPCWSTR, UINT);
        MessageBoxFn box = (MessageBoxFn)(void *)GetProcAddress(user32, "MessageBoxW");
        if (box != NULL)
            box(NULL, text, name, MB_ICONERROR);
    }
}

static int fail(const wchar_t *message)
{
    show_error(message);
    return 1;
}

static const uint8_t *find_rcdata(int id, DWORD *size)
{
    HRSRC found = FindResourceW(NULL, MAKEINTRESOURCEW(id), MAKEINTRESOURCEW(10));
    if (found == NULL)
        return NULL;
    HGLOBAL loaded = LoadResource(NULL, found);
    if (loaded == NULL)
        return NULL;
    *size = SizeofResource(NULL, found);
    return (const uint8_t *)LockResource(loaded);
}

/* --- raw deflate (RFC 1951), enough for the onefile payload -------------------------- */

typedef struct {
    const uint8_t *in;
    size_t in_len, in_pos;
    uint32_t bit_buf;
    int bit_count;
    uint8_t *out;
    size_t out_len, out_pos;
    int error;
} Inflate;

/* count/symbol: the canonical code, decoded bit by bit (puff's way); fast: for codes of
 * up to FAST_BITS bits, indexed by the next FAST_BITS input bits, (length << 9) | symbol. */
#define FAST_BITS 9
typedef struct {
    short count[16];
    short symbol[288];
    unsigned short fast[1 << FAST_BITS];
} Huffman;

static int get_bits(Inflate *s, int need)
{
    uint32_t value = s->bit_buf;
    while (s->bit_count < need) {
        if (s->in_pos >= s->in_len) {
            s->error = 1;
            return 0;
        }
        value |= (uint32_t)s->in[s->in_pos++] << s->bit_count;
        s->bit_count += 8;
    }
    s->bit_buf = value >> need;
    s->bit_count -= need;
    return (int)(value & ((1u << need) - 1));
}

static int build_huffman(Huffman *h, const short *lengths, int n)
{
    short offsets[16];
    int len, symbol;
    for (len = 0; len < 16; len++)
        h->count[len] = 0;
    for (symbol = 0; symbol < n; symbol++)
        h->count[lengths[symbol]]++;
    h->count[0] = 0;
    offsets[1] = 0;
    for (len = 1; len < 15; len++)
        offsets[len + 1] = (short)(offsets[len] + h->count[len]);
    for (symbol = 0; symbol < n; symbol++)
        if (lengths[symbol] != 0)
            h->symbol[offsets[lengths[symbol]]++] = (short)symbol;
    /* The lookup table: canonical codes, bit-reversed (deflate sends them MSB first into an
     * LSB-first stream). */
    memset(h->fast, 0, sizeof h->fast);
    int next[16], code = 0;
    for (len = 1; len < 16; len++) {
        code = (code + h->count[len - 1]) << 1;
        next[len] = code;
    }
    for (symbol = 0; symbol < n; symbol++) {
        len = lengths[symbol];
        if (len == 0)
            continue;
        int value = next[len]++;
        if (len > FAST_BITS)
            continue;
        int reversed = 0, bit;
        for (bit = 0; bit < len; bit++)
            reversed |= ((value >> bit) & 1) << (len - 1 - bit);
        for (; reversed < (1 << FAST_BITS); reversed += 1 << len)
            h->fast[reversed] = (unsigned short)((len << 9) | symbol);
    }
    return 0;
}

static int decode_slow(Inflate *s, const Huffman *h)
{
    int code = 0, first = 0, index = 0, len;
    for (len = 1; len <= 15; len++) {
        code |= get_bits(s, 1);
        int count = h->count[len];
        if (code - count < first)
            return h->symbol[index + (code - first)];
        index += count;
        first += count;
        first <<= 1;
        code <<= 1;
        if (s->error)
            break;
    }
    s->error = 1;
    return 0;
}

static int decode(Inflate *s, const Huffman *h)
{
    while (s->bit_count < FAST_BITS && s->in_pos < s->in_len) {
        s->bit_buf |= (uint32_t)s->in[s->in_pos++] << s->bit_count;
        s->bit_count += 8;
    }
    unsigned entry = h->fast[s->bit_buf & ((1u << FAST_BITS) - 1)];
    int len = (int)(entry >> 9);
    if (len != 0 && len <= s->bit_count) {
        s->bit_buf >>= len;
        s->bit_count -= len;
        return (int)(entry & 511);
    }
    return decode_slow(s, h);
}

static const short LENGTH_BASE[29] = {3,  4,  5,  6,  7,  8,  9,  10,  11,  13,  15,  17,  19,  23, 27,
                                      31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const short LENGTH_EXTRA[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                       2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const short DIST_BASE[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,
                                    33,  49,  65,  97,  129, 193,  257,  385,  513,  769,
                                    1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const short DIST_EXTRA[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                     6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static void inflate_codes(Inflate *s, const Huffman *lengths, const Huffman *distances)
{
    for (;;) {
        int symbol = decode(s, lengths);
        if (s->error)
            return;
        if (symbol < 256) {
            if (s->out_pos >= s->out_len) {
                s->error = 1;
                return;
            }
            s->out[s->out_pos++] = (uint8_t)symbol;
        } else if (symbol == 256) {
            return;
        } else {
            symbol -= 257;
            if (symbol >= 29) {
                s->error = 1;
                return;
            }
            size_t len = (size_t)LENGTH_BASE[symbol] + (size_t)get_bits(s, LENGTH_EXTRA[symbol]);
            int dsym = decode(s, distances);
            if (s->error || dsym >= 30) {
                s->error = 1;
                return;
            }
            size_t dist = (size_t)DIST_BASE[dsym] + (size_t)get_bits(s, DIST_EXTRA[dsym]);
            if (s->error || dist > s->out_pos || len > s->out_len - s->out_pos) {
                s->error = 1;
                return;
            }
            uint8_t *to = s->out + s->out_pos;
            const uint8_t *from = to - dist;
            s->out_pos += len;
            while (len--)
                *to++ = *from++;
        }
    }
}

static void inflate_dynamic(Inflate *s)
{
    static const short ORDER[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};
    short lengths[320];
    Huffman lencode, distcode;
    int nlen = get_bits(s, 5) + 257, ndist = get_bits(s, 5) + 1, ncode = get_bits(s, 4) + 4;
    int index;
    if (s->error || nlen > 286 || ndist > 30) {
        s->error = 1;
        return;
    }
    for (index = 0; index < 19; index++)
        lengths[ORDER[index]] = (short)(index < ncode ? get_bits(s, 3) : 0);
    build_huffman(&lencode, lengths, 19);
    index = 0;
    while (index < nlen + ndist && !s->error) {
        int symbol = decode(s, &lencode), repeat;
        short value = 0;
        if (symbol < 16) {
            lengths[index++] = (short)symbol;
            continue;
        }
        if (symbol == 16) {
            if (index == 0) {
                s->error = 1;
                return;
            }
            value = lengths[index - 1];
            repeat = 3 + get_bits(s, 2);
        } else if (symbol == 17) {
            repeat = 3 + get_bits(s, 3);
        } else {
            repeat = 11 + get_bits(s, 7);
        }
        if (index + repeat > nlen + ndist) {
            s->error = 1;
            return;
        }
        while (repeat--)
            lengths[index++] = value;
    }
    if (s->error)
        return;
    build_huffman(&lencode, lengths, nlen);
    build_huffman(&distcode, lengths + nlen, ndist);
    inflate_codes(s, &lencode, &distcode);
}

static void inflate_fixed(Inflate *s)
{
    static Huffman lencode, distcode;
    static int ready;
    if (!ready) {
        short lengths[320];
        int symbol;
        for (symbol = 0; symbol < 144; symbol++)
            lengths[symbol] = 8;
        for (; symbol < 256; symbol++)
            lengths[symbol] = 9;
        for (; symbol < 280; symbol++)
            lengths[symbol] = 7;
        for (; symbol < 288; symbol++)
            lengths[symbol] = 8;
        build_huffman(&lencode, lengths, 288);
        for (symbol = 0; symbol < 30; symbol++)
            lengths[symbol] = 5;
        build_huffman(&distcode, lengths, 30);
        ready = 1;
    }
    inflate_codes(s, &lencode, &distcode);
}

static void inflate_stored(Inflate *s)
{
    s->bit_buf = 0;
    s->bit_count = 0;
    if (s->in_pos + 4 > s->in_len) {
        s->error = 1;
        return;
    }
    size_t len = s->in[s->in_pos] | (s->in[s->in_pos + 1] << 8);
    size_t check = s->in[s->in_pos + 2] | (s->in[s->in_pos + 3] << 8);
    s->in_pos += 4;
    if (len != (~check & 0xffff) || len > s->in_len - s->in_pos || len > s->out_len - s->out_pos) {
        s->error = 1;
        return;
    }
    memcpy(s->out + s->out_pos, s->in + s->in_pos, len);
    s->in_pos += len;
    s->out_pos += len;
}

static int inflate_raw(const uint8_t *in, size_t in_len, uint8_t *out, size_t out_len)
{
    Inflate s = {in, in_len, 0, 0, 0, out, out_len, 0, 0};
    int last;
    do {
        last = get_bits(&s, 1);
        int type = get_bits(&s, 2);
        if (s.error)
            break;
        if (type == 0)
            inflate_stored(&s);
        else if (type == 1)
            inflate_fixed(&s);
        else if (type == 2)
            inflate_dynamic(&s);
        else
            s.error = 1;
    } while (!last && !s.error);
    return !s.error && s.out_pos == out_len;
}

/* --- the onefile runtime cache ------------------------------------------------------- */

static uint32_t read_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* One file of the payload (RT_RCDATA 203). */
typedef struct {
    wchar_t name[MAX_PATH];
    uint32_t raw, packed;
    const uint8_t *data;
} Entry;

/* Reading the payload's files in order: `left` files after offset `at`. */
typedef struct {
    const uint8_t *data;
    DWORD size;
    size_t at;
    long left;
    int damaged;
    int folders; /* EXEPYRT2: names may hold subfolders */
} Payload;

static Payload open_payload(const uint8_t *data, DWORD size)
{
    Payload payload = {data, size, 12, 0, 0, 0};
    if (size >= 12 && memcmp(data, "EXEPYRT2", 8) == 0)
        payload.folders = 1;
    else if (size < 12 || memcmp(data, "EXEPYRT1", 8) != 0)
        payload.damaged = 1;
    if (!payload.damaged && read_u32(data + 8) > 65536)
        payload.damaged = 1;
    if (!payload.damaged)
        payload.left = (long)read_u32(data + 8);
    return payload;
}

/* A name of a file below the folder it is unpacked into: "a\\b\\c.pyd", no drive, no
 * empty, "." or ".." part, no leading or trailing backslash. */
static int relative_path_ok(const wchar_t *name)
{
    if (wcschr(name, L':') || name[0] == L'\\')
        return 0;
    for (const wchar_t *part = name;;) {
        const wchar_t *end = wcschr(part, L'\\');
        size_t len = end ? (size_t)(end - part) : wcslen(part);
        if (len == 0 || (part[0] == L'.' && (len == 1 || (len == 2 && part[1] == L'.'))))
            return 0;
        if (end == NULL)
            return 1;
        part = end + 1;
    }
}

/* The next file into *entry; 0 at the end or where the payload is damaged (then
 * payload->damaged is set). */
static int next_entry(Payload *payload, Entry *entry)
{
    const uint8_t *data = payload->data;
    size_t pos = payload->at, size = payload->size;
    if (payload->left <= 0)
        return 0;
    payload->damaged = 1;
    if (pos + 2 > size)
        return 0;
    unsigned name_len = data[pos] | (data[pos + 1] << 8);
    pos += 2;
    if (name_len == 0 || name_len >= MAX_PATH || pos + name_len * 2 + 8 > size)
        return 0;
    memcpy(entry->name, data + pos, name_len * 2);
    entry->name[name_len] = 0;
    pos += name_len * 2;
    entry->raw = read_u32(data + pos);
    entry->packed = read_u32(data + pos + 4);
    pos += 8;
    if (entry->packed > size - pos || !(payload->folders ? relative_path_ok(entry->name) : !wcschr(entry->name, L'\\')) ||
        wcschr(entry->name, L'/'))
        return 0;
    entry->data = data + pos;
    payload->at = pos + entry->packed;
    payload->left--;
    payload->damaged = 0;
    return 1;
}

/* A name beside `path` that no other run uses: `path`.<process id>-<tick>.tmp */
static void temp_name(wchar_t *out, size_t out_len, const wchar_t *path)
{
    _snwprintf(out, out_len, L"%ls.%lu-%lu.tmp", path, GetCurrentProcessId(), GetTickCount());
}

/* Inflate the entry into a new file at path (which must not exist). */
static int write_entry(const wchar_t *path, const Entry *entry)
{
    uint8_t *buffer = VirtualAlloc(NULL, entry->raw ? entry->raw : 1, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
    int ok = buffer != NULL && inflate_raw(entry->data, entry->packed, buffer, entry->raw);
    if (ok) {
        DWORD written = 0;
        HANDLE file = CreateFileW(path, GENERIC_WRITE, 0, NULL, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL);
        ok = file != INVALID_HANDLE_VALUE && WriteFile(file, buffer, entry->raw, &written, NULL) && written == entry->raw;
        if (file != INVALID_HANDLE_VALUE) {
            ok = CloseHandle(file) && ok;
            if (!ok)
                DeleteFileW(path);
        }
    }
    if (buffer != NULL)
        VirtualFree(buffer, 0, MEM_RELEASE);
    return ok;
}

/* Remove `folder` and everything below it (best effort). */
static void remove_tree(const wchar_t *folder)
{
    wchar_t pattern[MAX_PATH * 2], path[MAX_PATH * 2];
    WIN32_FIND_DATAW found;
    _snwprintf(pattern, sizeof pattern / sizeof *pattern, L"%ls\\*", folder);
    HANDLE search = FindFirstFileW(pattern, &found);
    if (search != INVALID_HANDLE_VALUE) {
        do {
            if (wcscmp(found.cFileName, L".") == 0 || wcscmp(found.cFileName, L"..") == 0)
                continue;
            _snwprintf(path, sizeof path / sizeof *path, L"%ls\\%ls", folder, found.cFileName);
            if (found.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY)
                remove_tree(path);
            else
                DeleteFileW(path);
        } while (FindNextFileW(search, &found));
        FindClose(search);
    }
    RemoveDirectoryW(folder);
}

static const wchar_t DAMAGED[] = L"the runtime resource (RT_RCDATA 203) is damaged: rebuild the app";
static const wchar_t CANNOT_UNPACK[] = L"cannot unpack the Python runtime into %LOCALAPPDATA%\\exepy\\runtimes "
                                       L"(disk full, or the exe is damaged)";

/* Unpack the payload into a fresh folder next to `final`, then rename it into place. */
static int unpack_runtime(const wchar_t *final, const uint8_t *payload, DWORD size)
{
    wchar_t temp[MAX_PATH * 2], path[MAX_PATH * 2];
    temp_name(temp, sizeof temp / sizeof *temp, final);
    if (!CreateDirectoryW(temp, NULL))
        return fail(L"cannot create the runtime cache folder (%LOCALAPPDATA%\\exepy\\runtimes)");
    Payload files = open_payload(payload, size);
    Entry entry;
    while (next_entry(&files, &entry)) {
        _snwprintf(path, sizeof path / sizeof *path, L"%ls\\%ls", temp, entry.name);
        if (!write_entry(path, &entry)) {
            remove_tree(temp);
            return fail(CANNOT_UNPACK);
        }
    }
    if (files.damaged) {
        remove_tree(temp);
        return fail(DAMAGED);
    }
    if (!MoveFileExW(temp, final, 0)) {
        /* Another first run won the race: its folder is complete (it was renamed whole). */
        remove_tree(temp);
    }
    return 0;
}

/* The files of the cache folder (name, size) from one directory listing; -1 if the
 * folder does not exist. */
#define MAX_LISTED 256
typedef struct {
    wchar_t name[MAX_PATH];
    uint64_t size;
} Listed;

static int list_folder(const wchar_t *folder, Listed *listed)
{
    wchar_t pattern[MAX_PATH * 2];
    WIN32_FIND_DATAW found;
    _snwprintf(pattern, sizeof pattern / sizeof *pattern, L"%ls\\*", folder);
    HANDLE search = FindFirstFileExW(pattern, FindExInfoBasic, &found, FindExSearchNameMatch, NULL, FIND_FIRST_EX_LARGE_FETCH);
    if (search == INVALID_HANDLE_VALUE)
        return GetLastError() == ERROR_FILE_NOT_FOUND ? 0 : -1;
    int count = 0;
    do {
        if (!(found.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) && count < MAX_LISTED) {
            wcscpy(listed[count].name, found.cFileName);
            listed[count].size = ((uint64_t)found.nFileSizeHigh << 32) | found.nFileSizeLow;
            count++;
        }
    } while (FindNextFileW(search, &found));
    FindClose(search);
    return count;
}

static int listed_intact(const Listed *listed, int count, const Entry *entry)
{
    for (int i = 0; i < count; i++)
        if (_wcsicmp(listed[i].name, entry->name) == 0)
            return listed[i].size == entry->raw;
    return 0;
}

/* Make `folder` hold every payload file at its full size: unpack the whole payload if the
 * folder is missing; otherwise check one directory listing against the payload's names
 * and sizes (cheap: no file is opened) and rewrite any file that is missing or has the
 * wrong size (truncated, emptied). A rewritten file is written beside its place and
 * renamed over it, so it appears whole; two runs repairing at once write the same bytes. */
static int ensure_runtime(const wchar_t *folder, const uint8_t *payload, DWORD size)
{
    static Listed listed[MAX_LISTED];
    int found = list_folder(folder, listed);
    if (found < 0)
        return unpack_runtime(folder, payload, size);
    Payload files = open_payload(payload, size);
    Entry entry;
    while (next_entry(&files, &entry)) {
        if (listed_intact(listed, found, &entry))
            continue;
        wchar_t path[MAX_PATH * 2], temp[MAX_PATH * 2];
        _snwprintf(path, sizeof path / sizeof *path, L"%ls\\%ls", folder, entry.name);
        temp_name(temp, sizeof temp / sizeof *temp, path);
        if (!write_entry(temp, &entry))
            return fail(CANNOT_UNPACK);
        if (!MoveFileExW(temp, path, MOVEFILE_REPLACE_EXISTING)) {
            /* Another run put it there first and has it loaded: is it whole now? */
            DeleteFileW(temp);
            WIN32_FILE_ATTRIBUTE_DATA now;
            if (!GetFileAttributesExW(path, GetFileExInfoStandard, &now) || now.nFileSizeHigh != 0 ||
                now.nFileSizeLow != entry.raw)
                return fail(CANNOT_UNPACK);
        }
    }
    if (files.damaged)
        return fail(DAMAGED);
    return 0;
}

static int runtime_folder(const wchar_t *key, wchar_t *folder)
{
    wchar_t base[MAX_PATH];
    DWORD n = GetEnvironmentVariableW(L"LOCALAPPDATA", base, MAX_PATH);
    if (n == 0 || n >= MAX_PATH) {
        n = GetTempPathW(MAX_PATH, base);
        if (n == 0 || n >= MAX_PATH)
            return fail(L"neither %LOCALAPPDATA% nor a temporary folder is available");
        if (base[n - 1] == L'\\')
            base[n - 1] = 0;
    }
    _snwprintf(folder, MAX_PATH * 2, L"%ls\\exepy", base);
    CreateDirectoryW(folder, NULL);
    _snwprintf(folder, MAX_PATH * 2, L"%ls\\exepy\\runtimes", base);
    CreateDirectoryW(folder, NULL);
    _snwprintf(folder, MAX_PATH * 2, L"%ls\\exepy\\runtimes\\%ls", base, key);
    return 0;
}

/* --- the onefile packages cache (resource 205) ----------------------------------------- */

static const wchar_t PACKAGES_DAMAGED[] = L"the packages resource (RT_RCDATA 205) is damaged: rebuild the app";
static const wchar_t STAMP[] = L"exepy-packages.txt";
#define PACKAGES_HEADER 24 /* "EXEPYPK1" and the 16-digit hash */

/* Whether `folder` holds the stamp with `key`: written last into a folder renamed into place
 * whole, it says the folder was complete; the one file a later start reads. */
static int stamp_ok(const wchar_t *folder, const char *key)
{
    wchar_t path[MAX_PATH * 2];
    char text[32];
    DWORD got = 0;
    _snwprintf(path, sizeof path / sizeof *path, L"%ls\\%ls", folder, STAMP);
    HANDLE file = CreateFileW(path, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE, NULL, OPEN_EXISTING,
                              FILE_ATTRIBUTE_NORMAL, NULL);
    if (file == INVALID_HANDLE_VALUE)
        return 0;
    int ok = ReadFile(file, text, sizeof text, &got, NULL) && got == 16 && memcmp(text, key, 16) == 0;
    CloseHandle(file);
    return ok;
}

/* Unpack the packages into the new folder `temp`, creating subfolders (entries come sorted,
 * so a file's folders are made only where its folder differs from the previous file's),
 * and write the stamp last. */
static int unpack_packages(const wchar_t *temp, const uint8_t *payload, DWORD size, const char *key)
{
    wchar_t path[MAX_PATH * 2], made[MAX_PATH * 2] = L"";
    if (!CreateDirectoryW(temp, NULL))
        return fail(L"cannot create the packages' cache folder (%LOCALAPPDATA%\\exepy\\runtimes)");
    Payload files = open_payload(payload, size);
    if (!files.folders && !files.damaged)
        files.damaged = 1;
    Entry entry;
    size_t root = wcslen(temp) + 1;
    while (!files.damaged && next_entry(&files, &entry)) {
        int n = _snwprintf(path, sizeof path / sizeof *path, L"%ls\\%ls", temp, entry.name);
        wchar_t *last = wcsrchr(path, L'\\');
        if (n < 0 || (size_t)n >= sizeof path / sizeof *path - 1) {
            remove_tree(temp);
            return fail(L"a packaged file's path is too long for %LOCALAPPDATA%\\exepy\\runtimes");
        }
        *last = 0;
        if (wcscmp(path, made) != 0) {
            for (wchar_t *at = path + root; (at = wcschr(at, L'\\')) != NULL; at++) {
                *at = 0;
                CreateDirectoryW(path, NULL);
                *at = L'\\';
            }
            CreateDirectoryW(path, NULL);
            wcscpy(made, path);
        }
        *last = L'\\';
        if (!write_entry(path, &entry)) {
            remove_tree(temp);
            return fail(CANNOT_UNPACK);
        }
    }
    if (files.damaged) {
        remove_tree(temp);
        return fail(PACKAGES_DAMAGED);
    }
    _snwprintf(path, sizeof path / sizeof *path, L"%ls\\%ls", temp, STAMP);
    HANDLE file = CreateFileW(path, GENERIC_WRITE, 0, NULL, CREATE_NEW, FILE_ATTRIBUTE_NORMAL, NULL);
    DWORD written = 0;
    int ok = file != INVALID_HANDLE_VALUE && WriteFile(file, key, 16, &written, NULL) && written == 16;
    if (file != INVALID_HANDLE_VALUE)
        ok = CloseHandle(file) && ok;
    if (!ok) {
        remove_tree(temp);
        return fail(CANNOT_UNPACK);
    }
    return 0;
}

/* The packages of resource 205 in `runtime`\packages-<hash>, into `out` (empty when the app
 * has none). A first run unpacks them into a temporary folder and renames it into place; a
 * run that loses that race to another uses the winner's folder; a folder whose stamp is
 * missing (damaged) is replaced, or, where it cannot be (in use), this run uses its own. */
static int ensure_packages(const wchar_t *runtime, wchar_t *out, size_t out_len)
{
    DWORD size = 0;
    const uint8_t *data = find_rcdata(PACKAGES_ID, &size);
    out[0] = 0;
    if (data == NULL)
        return 0;
    char key[17];
    wchar_t wide_key[17], temp[MAX_PATH * 2], old[MAX_PATH * 2];
    if (size < PACKAGES_HEADER || memcmp(data, "EXEPYPK1", 8) != 0)
        return fail(PACKAGES_DAMAGED);
    for (int i = 0; i < 16; i++) {
        key[i] = (char)data[8 + i];
        if (!((key[i] >= '0' && key[i] <= '9') || (key[i] >= 'a' && key[i] <= 'f')))
            return fail(PACKAGES_DAMAGED);
        wide_key[i] = (wchar_t)key[i];
    }
    key[16] = 0;
    wide_key[16] = 0;
    _snwprintf(out, out_len, L"%ls\\packages-%ls", runtime, wide_key);
    if (stamp_ok(out, key))
        return 0;
    temp_name(temp, sizeof temp / sizeof *temp, out);
    if (unpack_packages(temp, data + PACKAGES_HEADER, size - PACKAGES_HEADER, key))
        return 1;
    if (MoveFileExW(temp, out, 0))
        return 0;
    if (stamp_ok(out, key)) { /* another first run won the race: its folder is complete */
        remove_tree(temp);
        return 0;
    }
    /* Damaged: move it aside and ours in; a run repairing at the same time may get there
     * first, and then its folder is whole. */
    _snwprintf(old, sizeof old / sizeof *old, L"%ls.old", temp);
    if (MoveFileExW(out, old, 0)) {
        int placed = MoveFileExW(temp, out, 0);
        remove_tree(old);
        if (placed)
            return 0;
    }
    if (MoveFileExW(temp, out, 0))
        return 0;
    if (stamp_ok(out, key)) {
        remove_tree(temp);
        return 0;
    }
    wcsncpy(out, temp, out_len - 1); /* the damaged one is in use elsewhere: run from ours */
    out[out_len - 1] = 0;
    return 0;
}

/* --- start-up modules frozen from the standard library zip ----------------------------- */

/* The table PyImport_FrozenModules points to, which CPython looks in before the path-based
 * import (after its own bootstrap), as an array of struct _frozen (Include/cpython/import.h):
 * {const char *name; const unsigned char *code (a marshalled code object); int size;
 * int is_package;} followed in 3.11 and 3.12 by PyObject *(*get_code)(void), gone in 3.13;
 * an entry with no name ends it. */
#define FROZEN_MAX 6
static uint64_t frozen[(FROZEN_MAX + 1) * 4];
static char frozen_names[FROZEN_MAX][32];

static void set_frozen(int index, int minor, const char *name, const uint8_t *code, int size, int is_package)
{
    uint8_t *entry = (uint8_t *)frozen + index * (minor >= 13 ? 24 : 32);
    memcpy(entry, &name, sizeof name);
    memcpy(entry + 8, &code, sizeof code);
    memcpy(entry + 16, &size, sizeof size);
    memcpy(entry + 20, &is_package, sizeof is_package);
}

static int read_at(HANDLE file, uint64_t offset, void *buffer, DWORD size)
{
    OVERLAPPED where = {0};
    where.Offset = (DWORD)offset;
    where.OffsetHigh = (DWORD)(offset >> 32);
    DWORD got = 0;
    return ReadFile(file, buffer, size, &got, &where) && got == size;
}

static uint16_t read_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* Whether this exe still ends with its standard library zip: the end record, and the
 * central directory it points to, inside the file. A copy cut short (a broken download)
 * would otherwise stop with CPython's "Failed to import encodings module". */
static int stdlib_zip_complete(void)
{
    HANDLE file = CreateFileW(exe_path, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                              OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    if (file == INVALID_HANDLE_VALUE)
        return 1; /* not readable here: left to CPython to report */
    static uint8_t tail[65536 + 22]; /* the end record, after a comment or a signature */
    LARGE_INTEGER file_size;
    int found = 0;
    if (GetFileSizeEx(file, &file_size) && file_size.QuadPart >= 22) {
        DWORD tail_size = file_size.QuadPart < (LONGLONG)sizeof tail ? (DWORD)file_size.QuadPart : (DWORD)sizeof tail;
        uint64_t tail_start = (uint64_t)file_size.QuadPart - tail_size;
        if (read_at(file, tail_start, tail, tail_size)) {
            for (DWORD end = tail_size - 22 + 1; !found && end-- > 0;) {
                if (read_u32(tail + end) != 0x06054b50)
                    continue;
                uint64_t at = tail_start + end;
                uint32_t cd_size = read_u32(tail + end + 12), cd_offset = read_u32(tail + end + 16);
                uint8_t header[4];
                found = cd_size <= at && cd_offset <= at - cd_size &&
                        (cd_size == 0 || (read_at(file, at - cd_size, header, 4) && read_u32(header) == 0x02014b50));
            }
        }
    }
    CloseHandle(file);
    return found;
}

/* The modules python.exe itself imports from its zip before running anything: the
 * encodings package with the codecs of UTF-8 and of the ANSI code page, and linecache
 * (3.13 imports it for -c). Served frozen, from the .pyc files of this exe's appended zip
 * (compiled by the runtime: the magic number checked), they cost a few reads here; through zipimport
 * they cost opening the file once per module and, first, parsing the zip's whole central
 * directory in Python (~2 ms under Wine), which a start that imports nothing else then
 * never does. Any problem: nothing is frozen and zipimport serves them as before.
 * The frozen encodings package finds its other codecs through sys._stdlib_dir, which
 * must then name the zip (set_start_up_paths): 3.13 only, where config.stdlib_dir reaches
 * it; 3.11 and 3.12 import the package itself from the zip as before. */
static void freeze_startup_modules(HMODULE python, int minor)
{
    /* The .pyc magic numbers of the final releases (PyImport_GetMagicNumber needs a
     * running interpreter); "\r\n" follows. */
    uint32_t expected = (minor == 11 ? 3495u : minor == 12 ? 3531u : minor == 13 ? 3571u : 0u) | 0x0a0d0000u;
    const void **table = (const void **)(void *)GetProcAddress(python, "PyImport_FrozenModules");
    if (table == NULL || *table != NULL || (expected & 0xffff) == 0)
        return;
    const char *wanted[FROZEN_MAX] = {minor >= 13 ? "encodings" : "", "encodings.aliases", "encodings.utf_8", frozen_names[0],
                                      "linecache", NULL};
    _snprintf(frozen_names[0], sizeof frozen_names[0], "encodings.cp%u", GetACP());
    HANDLE file = CreateFileW(exe_path, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                              OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    if (file == INVALID_HANDLE_VALUE)
        return;
    uint8_t *directory = NULL;
    static uint8_t tail[65536 + 22]; /* the end record, after a comment or a signature */
    LARGE_INTEGER file_size;
    if (!GetFileSizeEx(file, &file_size) || file_size.QuadPart < 22)
        goto done;
    DWORD tail_size = file_size.QuadPart < (LONGLONG)sizeof tail ? (DWORD)file_size.QuadPart : (DWORD)sizeof tail;
    uint64_t tail_start = (uint64_t)file_size.QuadPart - tail_size;
    if (!read_at(file, tail_start, tail, tail_size))
        goto done;
    DWORD end = tail_size - 22 + 1;
    while (end-- > 0 && read_u32(tail + end) != 0x06054b50)
        ;
    if (end == (DWORD)-1)
        goto done;
    uint32_t cd_size = read_u32(tail + end + 12), cd_offset = read_u32(tail + end + 16);
    uint64_t cd_start = tail_start + end - cd_size; /* the zip may follow other data */
    if (cd_size > tail_start + end || cd_offset > cd_start || cd_size > (64u << 20))
        goto done;
    uint64_t zip_start = cd_start - cd_offset;
    directory = HeapAlloc(GetProcessHeap(), 0, cd_size ? cd_size : 1);
    if (directory == NULL || !read_at(file, cd_start, directory, cd_size))
        goto done;
    int count = 0;
    for (uint32_t at = 0; at + 46 <= cd_size && read_u32(directory + at) == 0x02014b50;) {
        uint16_t method = read_u16(directory + at + 10), name_len = read_u16(directory + at + 28);
        uint32_t packed = read_u32(directory + at + 20), raw = read_u32(directory + at + 24);
        uint32_t local = read_u32(directory + at + 42);
        const char *name = (const char *)directory + at + 46;
        uint32_t next = at + 46 + name_len + read_u16(directory + at + 30) + read_u16(directory + at + 32);
        if (next > cd_size)
            break;
        for (int i = 0; wanted[i] != NULL && count < FROZEN_MAX; i++) {
            /* "encodings.utf_8" is "encodings/utf_8.pyc"; the package "encodings/__init__.pyc" */
            char path[64];
            int package = i == 0;
            if (wanted[i][0] == 0)
                continue; /* 3.11, 3.12: no frozen package */
            int n = _snprintf(path, sizeof path, package ? "%s/__init__.pyc" : "%s.pyc", wanted[i]);
            for (int k = 0; k < n; k++)
                if (path[k] == '.' && k < n - 4)
                    path[k] = '/';
            if (n != name_len || memcmp(name, path, n) != 0 || raw < 17 || (method != 0 && method != 8))
                continue;
            uint8_t header[30];
            if (!read_at(file, zip_start + local, header, 30) || read_u32(header) != 0x04034b50)
                break;
            uint64_t data_at = zip_start + local + 30 + read_u16(header + 26) + read_u16(header + 28);
            uint8_t *pyc = HeapAlloc(GetProcessHeap(), 0, raw), *in = method ? HeapAlloc(GetProcessHeap(), 0, packed) : pyc;
            if (pyc == NULL || in == NULL || packed != (method ? packed : raw) || !read_at(file, data_at, in, packed) ||
                (method && !inflate_raw(in, packed, pyc, raw)) || read_u32(pyc) != expected) {
                if (pyc != NULL)
                    HeapFree(GetProcessHeap(), 0, pyc);
                if (method && in != NULL)
                    HeapFree(GetProcessHeap(), 0, in);
                break;
            }
            if (method)
                HeapFree(GetProcessHeap(), 0, in);
            /* The .pyc header is 16 bytes: magic, flags, and the source's date and size or hash. */
            set_frozen(count++, minor, wanted[i], pyc + 16, (int)(raw - 16), package);
        }
        at = next;
    }
    if (count > 0)
        *table = frozen;
done:
    if (directory != NULL)
        HeapFree(GetProcessHeap(), 0, directory);
    CloseHandle(file);
}

/* --- start CPython -------------------------------------------------------------------- */

static FARPROC need(HMODULE dll, const char *name, int *missing)
{
    FARPROC proc = GetProcAddress(dll, name);
    if (proc == NULL)
        *missing = 1;
    return proc;
}

/* home and stdlib_dir, the PyConfig fields around the search path (the same order in
 * 3.11-3.13: home, platlibdir, module_search_paths_set, module_search_paths, stdlib_dir).
 * home = the runtime's folder: CPython's path calculation then looks for no landmark, venv
 * or ._pth file (a dozen failing file probes up to the drive's root), and sys.prefix is
 * that folder as it is for python.exe.
 * stdlib_dir = the exe's zip, 3.13 only (3.11 and 3.12 drop it when home is set and never
 * pass it on): sys._stdlib_dir, from which frozen modules get __file__ and the frozen
 * encodings package its __path__ (where the other codecs are found). */
static int set_start_up_paths(uint8_t *cfg, int minor, int search_paths_set, int search_paths, const wchar_t *home,
                              const wchar_t *stdlib_dir, SetStringFn set_string, StatusExceptionFn status_exception,
                              ExitStatusExceptionFn exit_status)
{
    wchar_t **home_field = (wchar_t **)(cfg + search_paths_set - 16), **stdlib_field = (wchar_t **)(cfg + search_paths + 16);
    if (*home_field != NULL || *(wchar_t **)(cfg + search_paths_set - 8) != NULL || *stdlib_field != NULL)
        return fail(L"unexpected PyConfig layout in this Python DLL: rebuild with a supported runtime");
    PyStatus status = set_string(cfg, home_field, home);
    if (!status_exception(status) && minor >= 13)
        status = set_string(cfg, stdlib_field, stdlib_dir);
    if (status_exception(status))
        exit_status(status);
    return 0;
}

int wmain(int argc, wchar_t **argv)
{
    DWORD n = GetModuleFileNameW(NULL, exe_path, MAX_PATH * 2);
    if (n == 0 || n >= MAX_PATH * 2)
        return fail(L"cannot find this executable's own path");
    IMAGE_DOS_HEADER *dos = (IMAGE_DOS_HEADER *)GetModuleHandleW(NULL);
    IMAGE_NT_HEADERS *nt = (IMAGE_NT_HEADERS *)((uint8_t *)dos + dos->e_lfanew);
    windowed = nt->OptionalHeader.Subsystem == IMAGE_SUBSYSTEM_WINDOWS_GUI;

    DWORD config_size = 0;
    const uint8_t *config = find_rcdata(CONFIG_ID, &config_size);
    wchar_t fields[4][MAX_PATH];
    int field = 0;
    size_t at = 0, len = 0;
    if (config != NULL) {
        for (at = 0; at + 1 < config_size && field < 4; at += 2) {
            wchar_t c = (wchar_t)(config[at] | (config[at + 1] << 8));
            if (len >= MAX_PATH - 1)
                break;
            fields[field][len++] = c;
            if (c == 0) {
                field++;
                len = 0;
            }
        }
    }
    if (field < 3)
        return fail(L"this executable has no exepy runtime configuration (RT_RCDATA 202): "
                    L"build it with 'exepy build'");
    const wchar_t *dll_name = fields[0], *mode = fields[1], *key = fields[2];
    int interpreter = field == 4 && wcscmp(fields[3], L"interpreter") == 0;
    if (wcsncmp(dll_name, L"python3", 7) != 0)
        return fail(L"the runtime configuration names no python3XX.dll");
    int minor = _wtoi(dll_name + 7);

    wchar_t folder[MAX_PATH * 2], dll_path[MAX_PATH * 2], stdlib_entry[MAX_PATH * 2];
    wchar_t packages[MAX_PATH * 2] = L"";
    if (wcscmp(mode, L"onefile") == 0) {
        if (runtime_folder(key, folder))
            return 1;
        _snwprintf(dll_path, sizeof dll_path / sizeof *dll_path, L"%ls\\%ls", folder, dll_name);
        DWORD payload_size = 0;
        const uint8_t *payload = find_rcdata(RUNTIME_ID, &payload_size);
        if (payload == NULL)
            return fail(L"the runtime resource (RT_RCDATA 203) is missing: rebuild the app");
        if (ensure_runtime(folder, payload, payload_size))
            return 1;
        if (ensure_packages(folder, packages, sizeof packages / sizeof *packages))
            return 1;
    } else {
        wcscpy(folder, exe_path);
        *wcsrchr(folder, L'\\') = 0;
        _snwprintf(dll_path, sizeof dll_path / sizeof *dll_path, L"%ls\\%ls", folder, dll_name);
    }

    HMODULE python = LoadLibraryExW(dll_path, NULL, LOAD_WITH_ALTERED_SEARCH_PATH);
    if (python == NULL) {
        wchar_t message[MAX_PATH * 3];
        _snwprintf(message, sizeof message / sizeof *message, L"cannot load %ls (keep the files of the app's folder together)", dll_path);
        return fail(message);
    }
    int missing = 0;
    InitPreConfigFn pre_init = (InitPreConfigFn)(void *)need(python, "PyPreConfig_InitIsolatedConfig", &missing);
    PreInitializeFn pre_initialize = (PreInitializeFn)(void *)need(python, "Py_PreInitialize", &missing);
    InitConfigFn config_init = (InitConfigFn)(void *)need(python, "PyConfig_InitIsolatedConfig", &missing);
    SetArgvFn set_argv = (SetArgvFn)(void *)need(python, "PyConfig_SetArgv", &missing);
    ListAppendFn list_append = (ListAppendFn)(void *)need(python, "PyWideStringList_Append", &missing);
    InitializeFromConfigFn initialize = (InitializeFromConfigFn)(void *)need(python, "Py_InitializeFromConfig", &missing);
    ConfigClearFn config_clear = (ConfigClearFn)(void *)need(python, "PyConfig_Clear", &missing);
    StatusExceptionFn status_exception = (StatusExceptionFn)(void *)need(python, "PyStatus_Exception", &missing);
    ExitStatusExceptionFn exit_status = (ExitStatusExceptionFn)(void *)need(python, "Py_ExitStatusException", &missing);
    RunStringFn run_string = (RunStringFn)(void *)need(python, "PyRun_SimpleStringFlags", &missing);
    FinalizeFn finalize = (FinalizeFn)(void *)need(python, "Py_FinalizeEx", &missing);
    BytesFromFn bytes_from = (BytesFromFn)(void *)need(python, "PyBytes_FromStringAndSize", &missing);
    SysSetFn sys_set = (SysSetFn)(void *)need(python, "PySys_SetObject", &missing);
    DecRefFn dec_ref = (DecRefFn)(void *)need(python, "Py_DecRef", &missing);
    PreInitializeFromArgsFn pre_initialize_args = (PreInitializeFromArgsFn)(void *)need(python, "Py_PreInitializeFromArgs", &missing);
    InitPreConfigFn pre_init_python = (InitPreConfigFn)(void *)need(python, "PyPreConfig_InitPythonConfig", &missing);
    InitConfigFn config_init_python = (InitConfigFn)(void *)need(python, "PyConfig_InitPythonConfig", &missing);
    RunMainFn run_main = (RunMainFn)(void *)need(python, "Py_RunMain", &missing);
    SetStringFn set_string = (SetStringFn)(void *)need(python, "PyConfig_SetString", &missing);
    if (missing)
        return fail(L"the Python DLL lacks the PyConfig API (Python 3.11 or later is needed)");

    int search_paths_set, search_paths, pathconfig_warnings;
    if (minor == 11 || minor == 12) {
        pathconfig_warnings = minor == 11 ? 264 : 268; /* after 3.12's int_max_str_digits */
        search_paths_set = 304;
        search_paths = 312;
    } else if (minor == 13) {
        pathconfig_warnings = 272; /* after 3.13's new cpu_count */
        search_paths_set = 312;
        search_paths = 320;
    } else {
        return fail(L"this launcher knows the PyConfig layout of Python 3.11, 3.12 and 3.13 only");
    }

    /* The interpreter's opt-ins: -X use_environment, -X user_site, -X write_bytecode among
     * the options before the script, -c or -m. */
    int use_environment = 0, user_site = 0, write_bytecode = 0;
    for (int i = 1; interpreter && i < argc; i++) {
        const wchar_t *arg = argv[i];
        if (arg[0] != L'-' || arg[1] == 0 || wcscmp(arg, L"--") == 0)
            break;
        if (arg[1] == L'-')
            continue;
        const wchar_t *x = NULL;
        size_t takes = wcscspn(arg + 1, L"cmWX"); /* the first option letter with a value */
        if (arg[1 + takes] == L'c' || arg[1 + takes] == L'm')
            break; /* -c CODE or -m MODULE: the rest is the program's */
        if (arg[1 + takes] == L'X')
            x = arg[2 + takes] ? arg + 2 + takes : (i + 1 < argc ? argv[++i] : NULL);
        else if (arg[1 + takes] == L'W' && arg[2 + takes] == 0)
            i++; /* -W ARG */
        if (x != NULL) {
            use_environment |= wcscmp(x, L"use_environment") == 0;
            user_site |= wcscmp(x, L"user_site") == 0;
            write_bytecode |= wcscmp(x, L"write_bytecode") == 0;
        }
    }

    uint64_t pre_storage[16] = {0};
    PyStatus status;
    argv[0] = exe_path;
    if (interpreter) {
        pre_init_python(pre_storage);
        *(int *)((uint8_t *)pre_storage + PRECONFIG_USE_ENVIRONMENT) = use_environment;
        status = pre_initialize_args(pre_storage, argc, argv);
    } else {
        pre_init(pre_storage);
        *(int *)((uint8_t *)pre_storage + PRECONFIG_UTF8_MODE) = 1;
        status = pre_initialize(pre_storage);
    }
    if (status_exception(status))
        exit_status(status);

    /* Larger than any PyConfig; 8-byte aligned. */
    static uint64_t storage[256], other[256];
    uint8_t *cfg = (uint8_t *)storage;
    if (interpreter) {
        /* Check the offsets we write against both default configs: the python one
         * (parse_argv, environment, user site on; not isolated) and the isolated one (the
         * opposite); bytecode and site are on in both. */
        uint8_t *iso = (uint8_t *)other;
        config_init_python(cfg);
        config_init(iso);
        static const int flags[] = {CONFIG_ISOLATED, CONFIG_USE_ENVIRONMENT, CONFIG_PARSE_ARGV,
                                    CONFIG_USER_SITE_DIRECTORY, CONFIG_SAFE_PATH};
        static const int python_values[] = {0, 1, 1, 1, 0}, isolated_values[] = {1, 0, 0, 0, 1};
        int layout_ok = *(int *)(cfg + CONFIG_WRITE_BYTECODE) == 1 && *(int *)(iso + CONFIG_WRITE_BYTECODE) == 1 &&
                        *(int *)(cfg + CONFIG_SITE_IMPORT) == 1 && *(int *)(iso + CONFIG_SITE_IMPORT) == 1 &&
                        *(int *)(cfg + pathconfig_warnings) == 1 && *(int *)(iso + pathconfig_warnings) == 0;
        for (size_t i = 0; i < sizeof flags / sizeof *flags; i++)
            layout_ok &= *(int *)(cfg + flags[i]) == python_values[i] && *(int *)(iso + flags[i]) == isolated_values[i];
        config_clear(iso);
        if (!layout_ok)
            return fail(L"unexpected PyConfig layout in this Python DLL: rebuild with a supported runtime");
    } else {
        config_init(cfg);
    }
    status = set_argv(cfg, argc, argv);
    if (status_exception(status))
        exit_status(status);
    if (((PyWideStringList *)(cfg + CONFIG_ARGV))->length != argc ||
        *(int *)(cfg + search_paths_set) != 0 || ((PyWideStringList *)(cfg + search_paths))->length != 0)
        return fail(L"unexpected PyConfig layout in this Python DLL: rebuild with a supported runtime");
    *(int *)(cfg + CONFIG_INSTALL_SIGNAL_HANDLERS) = 1;
    *(int *)(cfg + CONFIG_SITE_IMPORT) = 0;
    if (interpreter) {
        *(int *)(cfg + CONFIG_USE_ENVIRONMENT) = use_environment;
        *(int *)(cfg + CONFIG_USER_SITE_DIRECTORY) = user_site;
        *(int *)(cfg + CONFIG_WRITE_BYTECODE) = write_bytecode;
        *(int *)(cfg + pathconfig_warnings) = 0; /* no Lib\ beside the exe, on purpose */
    }
    /* The exe itself is the zip of the standard library. Written as <folder>\.\<name> so
     * that the path differs from sys.executable, which embeddedimport claims for the
     * bundle in the resources: each sys.path entry has one importer. */
    wchar_t *slash = wcsrchr(exe_path, L'\\');
    *slash = 0;
    _snwprintf(stdlib_entry, sizeof stdlib_entry / sizeof *stdlib_entry, L"%ls\\.\\%ls", exe_path, slash + 1);
    *slash = L'\\';
    *(int *)(cfg + search_paths_set) = 1;
    PyWideStringList *paths = (PyWideStringList *)(cfg + search_paths);
    status = list_append(paths, stdlib_entry);
    if (!status_exception(status))
        status = list_append(paths, folder);
    if (!status_exception(status) && packages[0] != 0)
        status = list_append(paths, packages); /* onefile: the unpacked packages (205) */
    if (status_exception(status))
        exit_status(status);
    if (set_start_up_paths(cfg, minor, search_paths_set, search_paths, folder, stdlib_entry, set_string, status_exception,
                           exit_status))
        return 1;
    if (!stdlib_zip_complete())
        return fail(L"this exe is incomplete: the standard library at its end is missing or cut short "
                    L"(a broken download or copy?); copy the whole file again");
    freeze_startup_modules(python, minor);
    status = initialize(cfg);
    config_clear(cfg);
    if (status_exception(status))
        exit_status(status);
    /* The resources are mapped with the image: handing them over copies them once, where
     * reading them back from the file in Python would open and parse the exe again. */
    static const struct {
        int id;
        const char *name;
    } handed[] = {{BOOT_ID, "_exepy_boot"}, {BUNDLE_ID, "_exepy_bundle"}, {COMMAND_ID, "_exepy_command"}};
    for (size_t i = 0; i < sizeof handed / sizeof *handed; i++) {
        DWORD size = 0;
        const uint8_t *data = find_rcdata(handed[i].id, &size);
        if (data == NULL)
            continue;
        void *value = bytes_from((const char *)data, (intptr_t)size);
        if (value == NULL || sys_set(handed[i].name, value) != 0)
            return fail(L"cannot hand the app's resources to Python (out of memory?)");
        dec_ref(value);
    }
    if (interpreter) {
        if (run_string(BOOTSTRAP_INTERPRETER, NULL) != 0)
            return fail(L"cannot start the interpreter's bundle (see the error above)");
        return run_main(); /* python.exe's main: runs the command line, then finalizes */
    }
    int failed = run_string(BOOTSTRAP, NULL);
    finalize();
    return failed ? 1 : 0;
}
