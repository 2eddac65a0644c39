/**
 * The MIME type a listing shows for a file, by extension: mime-types' registry, except for the
 * extensions below, where the store has answered a type of its own from the start (a device fleet's
 * `.key` is a private key, not a Keynote deck; `.deb` and `.rpm` under the types their own tools use)
 * or where the registry has none.
 */
import mime from 'mime-types';

const OWN: Record<string, string> = {
  cfg: 'text/plain',
  yaml: 'application/yaml',
  yml: 'application/yaml',
  py: 'text/x-python',
  tgz: 'application/gzip',
  deb: 'application/vnd.debian.binary-package',
  rpm: 'application/x-rpm',
  pem: 'application/x-pem-file',
  key: 'application/octet-stream',
};

/** The MIME type shown for an extension (lowercase, without the dot). */
export function mimeOf(extension: string): string {
  if (extension === '') return 'application/octet-stream';
  return (Object.hasOwn(OWN, extension) ? OWN[extension] : undefined) ?? (mime.lookup(extension) || 'application/octet-stream');
}

export function extensionOf(name: string): string {
  const dot = name.lastIndexOf('.');
  return dot > 0 ? name.slice(dot + 1).toLowerCase() : '';
}
