/* resdump: list and hash a PE file's resources the way Windows' loader finds them.
 *
 *   resdump.exe TARGET [OUT [TYPE NAME LANG]...]
 *
 * TARGET is loaded with LoadLibraryExW(LOAD_LIBRARY_AS_DATAFILE), or TARGET "--self" uses
 * this running program's own image. Every resource reached through EnumResourceTypesW /
 * EnumResourceNamesW / EnumResourceLanguagesW is looked up again with FindResourceExW and
 * written to OUT (UTF-8; standard output when OUT is missing or "-") as
 *     RES <tab> type <tab> name <tab> lang <tab> size <tab> sha256
 * ids as "#123", names as stored. Each TYPE NAME LANG triple is then looked up directly
 * (strings passed to FindResourceExW as given, so "#10" is an id and names are matched the
 * loader's way) and written as FIND lines, with "MISSING" when the loader does not find it.
 * Built by the tests with x86_64-w64-mingw32-gcc -municode; run under Wine.
 */
#include <windows.h>
#include <fcntl.h>
#include <io.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <wchar.h>

/* SHA-256 (FIPS 180-4), small and slow: resources are small. */
static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const unsigned char *p) {
    uint32_t w[64], a, b, c, d, e, f, g, k, t1, t2;
    int i;
    for (i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = h[0]; b = h[1]; c = h[2]; d = h[3]; e = h[4]; f = h[5]; g = h[6]; k = h[7];
    for (i = 0; i < 64; i++) {
        t1 = k + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

static void sha256_hex(const unsigned char *data, size_t size, char out[65]) {
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    unsigned char tail[128];
    size_t full = size / 64 * 64, rest = size - full, i, tail_len;
    uint64_t bits = (uint64_t)size * 8;
    for (i = 0; i < full; i += 64) sha256_block(h, data + i);
    memset(tail, 0, sizeof tail);
    if (rest) memcpy(tail, data + full, rest);
    tail[rest] = 0x80;
    tail_len = rest + 1 + 8 <= 64 ? 64 : 128;
    for (i = 0; i < 8; i++) tail[tail_len - 1 - i] = (unsigned char)(bits >> (8 * i));
    for (i = 0; i < tail_len; i += 64) sha256_block(h, tail + i);
    for (i = 0; i < 8; i++) sprintf(out + 8 * i, "%08x", (unsigned)h[i]);
}

static FILE *out;

static void put_id(LPCWSTR id) {
    if (IS_INTRESOURCE(id)) {
        fprintf(out, "#%u", (unsigned)(ULONG_PTR)id);
    } else {
        char buf[4096];
        WideCharToMultiByte(CP_UTF8, 0, id, -1, buf, sizeof buf, NULL, NULL);
        fputs(buf, out);
    }
}

static void put_resource(const char *tag, HMODULE module, LPCWSTR type, LPCWSTR name, WORD lang) {
    HRSRC found = FindResourceExW(module, type, name, lang);
    fprintf(out, "%s\t", tag);
    put_id(type);
    fputc('\t', out);
    put_id(name);
    fprintf(out, "\t%u\t", (unsigned)lang);
    if (!found) {
        fprintf(out, "MISSING\n");
        return;
    }
    {
        DWORD size = SizeofResource(module, found);
        HGLOBAL loaded = LoadResource(module, found);
        const unsigned char *data = loaded ? (const unsigned char *)LockResource(loaded) : NULL;
        char hex[65];
        if (!data) {
            fprintf(out, "UNLOADABLE\n");
            return;
        }
        sha256_hex(data, size, hex);
        fprintf(out, "%lu\t%s\n", (unsigned long)size, hex);
    }
}

static BOOL CALLBACK on_language(HMODULE module, LPCWSTR type, LPCWSTR name, WORD lang, LONG_PTR param) {
    (void)param;
    put_resource("RES", module, type, name, lang);
    return TRUE;
}

static BOOL CALLBACK on_name(HMODULE module, LPCWSTR type, LPWSTR name, LONG_PTR param) {
    (void)param;
    EnumResourceLanguagesW(module, type, name, on_language, 0);
    return TRUE;
}

static BOOL CALLBACK on_type(HMODULE module, LPWSTR type, LONG_PTR param) {
    (void)param;
    EnumResourceNamesW(module, type, on_name, 0);
    return TRUE;
}

int wmain(int argc, wchar_t **argv) {
    HMODULE module;
    int i;
    if (argc < 2 || (argc > 3 && (argc - 3) % 3 != 0)) {
        fwprintf(stderr, L"usage: resdump TARGET|--self [OUT|- [TYPE NAME LANG]...]\n");
        return 2;
    }
    if (argc == 2 || wcscmp(argv[2], L"-") == 0) {
        _setmode(_fileno(stdout), _O_BINARY);
        out = stdout;
    } else {
        out = _wfopen(argv[2], L"wb");
    }
    if (!out) {
        fwprintf(stderr, L"cannot open %ls\n", argv[2]);
        return 2;
    }
    if (wcscmp(argv[1], L"--self") == 0) {
        module = GetModuleHandleW(NULL);
    } else {
        module = LoadLibraryExW(argv[1], NULL, LOAD_LIBRARY_AS_DATAFILE);
    }
    if (!module) {
        fprintf(out, "ERROR\tLoadLibraryExW\t%lu\n", (unsigned long)GetLastError());
        fclose(out);
        return 3;
    }
    fprintf(out, "OK\n");
    EnumResourceTypesW(module, on_type, 0);
    for (i = 3; i + 2 < argc; i += 3) {
        put_resource("FIND", module, argv[i], argv[i + 1], (WORD)_wtoi(argv[i + 2]));
    }
    fprintf(out, "END\n");
    fclose(out);
    return 0;
}
