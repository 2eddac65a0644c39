import { describe, expect, it } from 'vitest';
import { edgeHost } from './edge.js';

describe('edgeHost: where qbee-cli is told to dial https', () => {
  it('takes PUBLIC_URL first, writing out the port of an http one and loopback as localhost', () => {
    expect(edgeHost('https://fleet.example.com:8443', 'ignored:1')).toBe('fleet.example.com:8443');
    expect(edgeHost('https://fleet.example.com/', 'ignored:1')).toBe('fleet.example.com');
    expect(edgeHost('http://fleet.example.com', 'x')).toBe('fleet.example.com:80');
    expect(edgeHost('http://127.0.0.1:8080', 'x')).toBe('localhost:8080');
    expect(edgeHost('http://[::1]:8080', 'x')).toBe('localhost:8080');
  });

  it('without PUBLIC_URL takes the request host, loopback as localhost (qbee-cli skips the certificate check there)', () => {
    expect(edgeHost(undefined, 'localhost:8080')).toBe('localhost:8080');
    expect(edgeHost(undefined, '127.0.0.1:8080')).toBe('localhost:8080');
    expect(edgeHost(undefined, '[::1]:8080')).toBe('localhost:8080');
    expect(edgeHost(undefined, 'Fleet.Example.com')).toBe('fleet.example.com');
    expect(edgeHost(undefined, '[2001:db8::1]:9000')).toBe('[2001:db8::1]:9000');
  });

  it('names no edge for a host header that is not a host', () => {
    for (const bad of ['', 'a b', 'evil.com/path', 'user@evil.com', 'x:99999', 'x:', '-x', 'x\r\nSet-Cookie: a']) {
      expect(edgeHost(undefined, bad), bad).toBeUndefined();
    }
  });
});
