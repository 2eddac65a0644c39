/** passwd(5) entries, as the console's login and the sshkeys bundle read them: one parser for both. */

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

/** Parses one line of passwd(5); null when it is not a well-formed entry (a name, numeric ids, seven fields). */
export function parsePasswdLine(line: string): PasswdEntry | null {
  const fields = line.split(':');
  if (fields.length < 7 || fields[0] === '') return null;
  const uid = Number(fields[2]);
  const gid = Number(fields[3]);
  if (!Number.isInteger(uid) || !Number.isInteger(gid) || fields[2] === '' || fields[3] === '') return null;
  return { name: fields[0], uid, gid, home: fields[5], shell: fields[6] };
}
