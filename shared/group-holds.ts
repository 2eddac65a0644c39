/**
 * What a group holds, in words: the broker's refusal to delete a non-empty group and the console's
 * note in place of the Delete button say it the same way ("holds 3 devices and 1 group").
 */

export interface GroupHolds {
  devices: number;
  groups: number;
}

/** "holds 3 devices and 1 group"; "holds nothing" for an empty group. */
export function holdsSentence(holds: GroupHolds): string {
  const parts = [
    holds.devices > 0 ? `${holds.devices} ${holds.devices === 1 ? 'device' : 'devices'}` : '',
    holds.groups > 0 ? `${holds.groups} ${holds.groups === 1 ? 'group' : 'groups'}` : '',
  ].filter(Boolean);
  return parts.length ? `holds ${parts.join(' and ')}` : 'holds nothing';
}
