import { describe, expect, it } from 'vitest';
import { extensionOf, mimeOf } from './mime.js';

describe('mimeOf', () => {
  it('answers what the store answered before for the extensions it knew', () => {
    const before: Record<string, string> = {
      txt: 'text/plain',
      log: 'text/plain',
      conf: 'text/plain',
      cfg: 'text/plain',
      ini: 'text/plain',
      md: 'text/markdown',
      csv: 'text/csv',
      html: 'text/html',
      htm: 'text/html',
      css: 'text/css',
      js: 'text/javascript',
      json: 'application/json',
      xml: 'application/xml',
      yaml: 'application/yaml',
      yml: 'application/yaml',
      toml: 'application/toml',
      sh: 'application/x-sh',
      py: 'text/x-python',
      pdf: 'application/pdf',
      png: 'image/png',
      jpg: 'image/jpeg',
      jpeg: 'image/jpeg',
      gif: 'image/gif',
      svg: 'image/svg+xml',
      webp: 'image/webp',
      zip: 'application/zip',
      gz: 'application/gzip',
      tgz: 'application/gzip',
      tar: 'application/x-tar',
      xz: 'application/x-xz',
      bz2: 'application/x-bzip2',
      deb: 'application/vnd.debian.binary-package',
      rpm: 'application/x-rpm',
      bin: 'application/octet-stream',
      img: 'application/octet-stream',
      iso: 'application/x-iso9660-image',
      pem: 'application/x-pem-file',
      crt: 'application/x-x509-ca-cert',
      key: 'application/octet-stream',
    };
    for (const [extension, type] of Object.entries(before)) expect([extension, mimeOf(extension)]).toEqual([extension, type]);
  });

  it('takes the registry for the rest, and octet-stream for what nobody knows', () => {
    expect(mimeOf('mp4')).toBe('video/mp4');
    expect(mimeOf('wasm')).toBe('application/wasm');
    expect(mimeOf('')).toBe('application/octet-stream');
    expect(mimeOf('nosuchextension')).toBe('application/octet-stream');
    expect(mimeOf('constructor')).toBe('application/octet-stream');
    expect(mimeOf(extensionOf('firmware.SWU'))).toBe('application/octet-stream');
  });
});
