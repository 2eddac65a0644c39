/**
 * GET /webconsole/settings: the zod schema the broker declares as `response` and its type for the
 * console (imported as a type only, so no zod reaches the browser bundle). Nothing secret.
 */
import { z } from 'zod';

export const consoleSettings = z.object({
  map: z.object({
    tile_url: z
      .string()
      .nullable()
      .describe('URL template of the map tiles (`{z}`, `{x}`, `{y}`, maybe `{s}`), from MAP_TILE_URL; null: the console draws its bundled world outline'),
    attribution: z.string().describe('Credit the tile provider asks to be shown (MAP_TILE_ATTRIBUTION); "" when none'),
  }),
});
export type ConsoleSettings = z.infer<typeof consoleSettings>;
